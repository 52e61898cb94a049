package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"shoal"
)

// Conn is a client connection to the shoal API over a list of nodes of one
// cluster: one gRPC connection per node, and a call that a node could not
// take goes to the next. A call moves on only when sending it again cannot do anything
// twice:
//
//   - the node was not reached (the dial failed: nothing was sent);
//   - the node answered UNAVAILABLE marked not-applied (shoal.IsNotApplied:
//     a node cut off from etcd refuses every call before doing anything);
//   - the call only reads (get, list, watch, logs, status, snapshot).
//
// A create is not among them: its request id makes a retry return what the
// first attempt made, but only while that sandbox exists; one deleted in
// between would be made again. A caller that accepts that (the CLI's
// create) marks its call with Resendable.
//
// Any other UNAVAILABLE (a write that may have been applied before the
// connection broke) is returned as it is. The node that last answered is
// tried first by the next call.
type Conn struct {
	addrs []string
	conns []*grpc.ClientConn

	mu  sync.Mutex
	cur int
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// Dial returns a Conn over addrs (host:port each, in order of preference).
// Nothing is dialled until the first call.
func Dial(addrs []string, opts ...grpc.DialOption) (*Conn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no node address")
	}
	c := &Conn{addrs: addrs}
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

func (f *Conn) start() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *Conn) answered(i int) {
	f.mu.Lock()
	f.cur = i
	f.mu.Unlock()
}

// Close closes every node's connection.
func (f *Conn) Close() error {
	for _, c := range f.conns {
		c.Close()
	}
	return nil
}

func (f *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	first := f.start()
	var err error
	for k := range f.conns {
		i := (first + k) % len(f.conns)
		if err = f.conns[i].Invoke(ctx, method, args, reply, opts...); err == nil {
			f.answered(i)
			return nil
		}
		if ctx.Err() != nil || !retryable(ctx, method, err) {
			return err
		}
	}
	return err
}

func (f *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams || len(f.conns) == 1 {
		return f.conns[f.start()].NewStream(ctx, desc, method, opts...)
	}
	return &replayStream{f: f, ctx: ctx, desc: desc, method: method, opts: opts}, nil
}

type resendKey struct{}

// Resendable marks the calls made with ctx as safe to send again, to
// another node, after any UNAVAILABLE: the caller vouches that doing the
// call twice is harmless (a create with a request id).
func Resendable(ctx context.Context) context.Context {
	return context.WithValue(ctx, resendKey{}, true)
}

func resendable(ctx context.Context) bool { v, _ := ctx.Value(resendKey{}).(bool); return v }

// retryable reports whether a failed call may be sent to another node.
func retryable(ctx context.Context, method string, err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	if resendable(ctx) {
		return true
	}
	if shoal.IsNotApplied(err) || notSent(err) {
		return true
	}
	name := method[strings.LastIndex(method, "/")+1:]
	for _, p := range []string{"Get", "List", "Watch"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch name {
	case "Logs", "Status", "Snapshot", "CopyFromSandbox":
		return true
	}
	return false
}

// notSent: gRPC could not connect to the node, so the call never left.
func notSent(err error) bool {
	return strings.Contains(status.Convert(err).Message(), "Error while dialing")
}

// replayStream is a server-streaming call that may start over on another
// node until its first message arrives: the generated client sends the
// request and closes its side before receiving, so the request is kept
// and sent again.
type replayStream struct {
	f      *Conn
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	opts   []grpc.CallOption

	sent   []any
	closed bool
	cs     grpc.ClientStream
	first  int // the node tried first
	next   int // tries made
	got    bool
}

func (s *replayStream) open() error {
	if s.next == 0 {
		s.first = s.f.start()
	}
	var err error
	for s.next < len(s.f.conns) {
		i := (s.first + s.next) % len(s.f.conns)
		s.next++
		var cs grpc.ClientStream
		if cs, err = s.f.conns[i].NewStream(s.ctx, s.desc, s.method, s.opts...); err == nil {
			for _, m := range s.sent {
				if err = cs.SendMsg(m); err != nil {
					break
				}
			}
			if err == nil && s.closed {
				err = cs.CloseSend()
			}
			if err == nil {
				s.cs = cs
				s.f.answered(i)
				return nil
			}
		}
		if s.ctx.Err() != nil || !retryable(s.ctx, s.method, err) {
			return err
		}
	}
	return err
}

func (s *replayStream) SendMsg(m any) error {
	if s.cs != nil {
		return s.cs.SendMsg(m)
	}
	s.sent = append(s.sent, m)
	return nil
}

func (s *replayStream) CloseSend() error {
	if s.cs != nil {
		return s.cs.CloseSend()
	}
	s.closed = true
	return nil
}

func (s *replayStream) RecvMsg(m any) error {
	for {
		if s.cs == nil {
			if err := s.open(); err != nil {
				return err
			}
		}
		err := s.cs.RecvMsg(m)
		if err == nil {
			s.got = true
			return nil
		}
		if s.got || err == io.EOF || s.ctx.Err() != nil || !retryable(s.ctx, s.method, err) || s.next >= len(s.f.conns) {
			return err
		}
		s.cs = nil // the next node
	}
}

func (s *replayStream) Header() (metadata.MD, error) {
	if s.cs == nil {
		if err := s.open(); err != nil {
			return nil, err
		}
	}
	return s.cs.Header()
}

func (s *replayStream) Trailer() metadata.MD {
	if s.cs == nil {
		return nil
	}
	return s.cs.Trailer()
}

func (s *replayStream) Context() context.Context {
	if s.cs == nil {
		return s.ctx
	}
	return s.cs.Context()
}
