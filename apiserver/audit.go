package apiserver

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/audit"
)

// Auditor receives a record of every audited call (package audit).
type Auditor interface {
	Write(audit.Record) error
}

// RequestIDHeader carries a call's request id: sent by a client that has
// one, returned by the server on every audited call.
const RequestIDHeader = "shoal-request-id"

// audited: every call but the reads (get, list, watch, status). Exec and
// logs are audited: they reach into containers.
func audited(method string) bool {
	return !slices.Equal(methodRoles[method], readers)
}

// requestID is the call's request id: the create's own, the client's
// header (on a forwarded call: the forwarding node's, which is the call's
// own id there), or a new one; it is returned in the response header.
func requestID(ctx context.Context, req any) string {
	id := ""
	if r, ok := req.(interface{ GetRequestId() string }); ok {
		id = r.GetRequestId()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && id == "" {
		if v := md.Get(RequestIDHeader); len(v) > 0 && len(v[0]) <= 128 {
			id = v[0]
		}
	}
	if id == "" {
		id = uuid.NewString()
	}
	return id
}

// requestIDKey carries a call's request id in its context, so that a call
// forwarded to a sandbox's owner carries it on (forward.go: owner) and both
// nodes' audit lines show the same id.
type requestIDKey struct{}

func withRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// requestIDOf is the request id of the call ctx serves, or "".
func requestIDOf(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// objectOf names what a request touches: workspace/name of its sandbox or
// provider, or the node or member it names.
func objectOf(req any) string {
	meta := func(m *shoalv1.ObjectMeta) string {
		if m.GetName() == "" {
			return ""
		}
		return ws(m.GetWorkspace()) + "/" + m.GetName()
	}
	switch r := req.(type) {
	case interface{ AuditObject() string }: // another service's request
		return r.AuditObject()
	case *shoalv1.ExecInput: // an interactive exec's first message
		return objectOf(r.GetStart())
	case *shoalv1.CopyToSandboxInput: // a copy's first message
		return objectOf(r.GetStart())
	case interface{ GetSandbox() *shoalv1.Sandbox }:
		return meta(r.GetSandbox().GetMeta())
	case interface{ GetProvider() *shoalv1.Provider }:
		return meta(r.GetProvider().GetMeta())
	case interface {
		GetWorkspace() string
		GetName() string
	}:
		if r.GetName() == "" {
			return ""
		}
		return ws(r.GetWorkspace()) + "/" + r.GetName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return ""
}

// audit writes the record of a finished call, if it is audited.
func (s *Server) audit(ctx context.Context, method string, req any, reqID string, start time.Time, err error) {
	as := s.twin(method)
	if r, ok := req.(interface{ AuditedAs() string }); ok && r.AuditedAs() != "" {
		as = r.AuditedAs() // it did more than its twin
	}
	if s.cfg.Audit == nil || !audited(as) {
		return
	}
	st, _ := status.FromError(err)
	r := audit.Record{Time: start.UTC(), Node: s.cfg.Node, Method: method, Object: objectOf(req),
		Code: st.Code().String(), RequestID: reqID, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		r.Error = st.Message()
	}
	if s.cfg.Transport.Secure() {
		if id, ierr := identity(ctx); ierr == nil || id.Subject != "" {
			r.Identity, r.Role = id.Subject, string(id.Role)
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.Peer = p.Addr.String()
	}
	r.ForwardedBy = s.forwarder(ctx)
	if werr := s.cfg.Audit.Write(r); werr != nil {
		s.log.Error("audit log write failed", "method", method, "err", werr)
	}
}

// firstMessage remembers the first message a stream's handler receives:
// the request of a client-streaming or server-streaming call, for audit.
type firstMessage struct {
	grpc.ServerStream
	first any
}

func (f *firstMessage) RecvMsg(m any) error {
	err := f.ServerStream.RecvMsg(m)
	if err == nil && f.first == nil {
		f.first = m
	}
	return err
}
