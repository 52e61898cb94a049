package openshellapi

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The streaming methods (WatchSandbox, ExecSandbox, ExecSandboxInteractive,
// GetSandboxLogs) name a sandbox by its id, shoal's uid, and call the
// shoal.v1 streaming methods in process through the stream adapters below:
// shoal's Exec, ExecInteractive, Logs, WatchSandboxes and WatchEvents
// reach the owning node themselves (forward.go of package apiserver), so
// nothing here forwards anything.

// sandboxRef is the workspace and name of the sandbox with id (field names
// the request's field). The store's watch cache answers it: an id it holds
// costs no etcd read (store.SandboxRefByUID).
func (s *Server) sandboxRef(ctx context.Context, field, id string) (ws, name string, err error) {
	if id == "" {
		return "", "", invalid(field, "is required: the sandbox's id (metadata.id)")
	}
	ws, name, err = s.cfg.Store.SandboxRefByUID(ctx, id)
	if err != nil {
		return "", "", grpcError(err, false)
	}
	return ws, name, nil
}

// shoalStream is a shoal.v1 server stream of a method called in process:
// what the method sends goes to send, what it receives comes from recv,
// and its context is ctx (the caller's call, authorized as the method's
// twin). It satisfies grpc.ServerStreamingServer[Out] and, with recv set,
// grpc.BidiStreamingServer[In, Out]. The shoal methods used with it send
// and receive through Send and Recv only; headers and trailers are the
// caller's stream's, or none for a unary caller (GetSandboxLogs).
type shoalStream[In, Out any] struct {
	ctx    context.Context
	caller grpc.ServerStream // nil for a unary caller
	send   func(Out) error
	recv   func() (In, error)
}

func (s *shoalStream[In, Out]) Send(m Out) error         { return s.send(m) }
func (s *shoalStream[In, Out]) Recv() (In, error)        { return s.recv() }
func (s *shoalStream[In, Out]) Context() context.Context { return s.ctx }

func (s *shoalStream[In, Out]) SetHeader(md metadata.MD) error {
	if s.caller == nil {
		return nil
	}
	return s.caller.SetHeader(md)
}

func (s *shoalStream[In, Out]) SendHeader(md metadata.MD) error {
	if s.caller == nil {
		return nil
	}
	return s.caller.SendHeader(md)
}

func (s *shoalStream[In, Out]) SetTrailer(md metadata.MD) {
	if s.caller != nil {
		s.caller.SetTrailer(md)
	}
}

// SendMsg and RecvMsg are not used by the shoal methods called this way
// (their messages are not the caller's): refuse rather than send a shoal
// message on an OpenShell stream.
func (s *shoalStream[In, Out]) SendMsg(any) error {
	return errors.New("openshellapi: SendMsg on an adapted stream")
}

func (s *shoalStream[In, Out]) RecvMsg(any) error {
	return errors.New("openshellapi: RecvMsg on an adapted stream")
}
