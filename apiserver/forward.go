package apiserver

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/pki"
	"shoal/store"
	"shoal/tracectx"
)

// Any node serves any call: a call that needs a sandbox's container (exec,
// logs) is served by the node that owns it (spec.node), and a node that
// does not own the sandbox forwards the call to the owner's advertised
// address and relays the stream as it comes, exit code included. Only the
// owner's agent and API touch its engine.

// forwardedBy marks a forwarded call with the forwarding node's id: the
// owner serves it locally or refuses it, never forwards it again.
const forwardedBy = "shoal-forwarded-by"

// answeredBy is a trailer every node sets on every stream it serves, with
// its id: a forwarded stream that ends without it got no status from the
// owner at all, so the owner went away (its process died, its host or the
// network between went down) before it could answer.
const answeredBy = "shoal-answered-by"

// peers caches one client connection per peer address.
type peers struct {
	transport *pki.Transport // a node's certificate, when the cluster runs mutual TLS
	tracing   trace.TracerProvider
	mu        sync.Mutex
	conns     map[string]*grpc.ClientConn
}

func (p *peers) client(addr string) (shoalv1.ShoalClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return shoalv1.NewShoalClient(c), nil
	}
	tp := p.tracing
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.transport.DialCreds()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(tracectx.Propagator))),
		grpc.WithReadBufferSize(shoal.ClientBufferBytes), grpc.WithWriteBufferSize(shoal.ClientBufferBytes),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(shoal.MaxResponseBytes), grpc.MaxCallSendMsgSize(shoal.MaxRequestBytes), grpc.ForceCodecV2(newRelayCodec())))
	if err != nil {
		return nil, shoal.Unavailable("peer %s: %v", addr, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = c
	return shoalv1.NewShoalClient(c), nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}

// forwarder is the node that forwarded this call, or "". Only a node's
// word is taken: over TLS the header counts from a caller whose
// certificate names the node role, so a client cannot pose as a
// forwarding node (in the audit log, or to stop a call being forwarded).
// A plaintext node serves loopback (or --insecure) and trusts its callers.
func (s *Server) forwarder(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(forwardedBy)
	if len(v) == 0 {
		return ""
	}
	if s.cfg.Transport.Secure() {
		if id, err := identity(ctx); err != nil || id.Role != pki.RoleNode {
			return ""
		}
	}
	return v[0]
}

// ownerCall is a call to be forwarded to a sandbox's owner.
type ownerCall struct {
	node   string // the owner's id
	client shoalv1.ShoalClient
	ctx    context.Context // marked as forwarded by this node
}

// owner returns how to call the node that owns sb, or nil when it is this
// node.
func (s *Server) owner(ctx context.Context, sb *shoalv1.Sandbox) (*ownerCall, error) {
	node := store.NodeOf(sb)
	if node == "" || node == s.cfg.Node {
		return nil, nil
	}
	name := sb.GetMeta().GetName()
	if by := s.forwarder(ctx); by != "" {
		return nil, shoal.FailedPrecondition("sandbox %q belongs to node %q, and node %q was asked for it by node %q: their registry entries disagree",
			name, node, s.cfg.Node, by)
	}
	n, err := s.cfg.Store.GetNode(ctx, node)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return nil, shoal.Unavailable("sandbox %q belongs to node %q, which is not in the node registry", name, node)
	}
	if err != nil {
		return nil, err
	}
	if !n.GetStatus().GetReady() {
		seen := "its liveness lease expired"
		if t := n.GetStatus().GetLastSeen(); t != nil {
			seen = fmt.Sprintf("last seen %s ago", time.Since(t.AsTime()).Round(time.Second))
		}
		return nil, shoal.Unavailable("sandbox %q runs on node %q, which is NotReady (%s); try again when it is back", name, node, seen)
	}
	c, err := s.peers.client(n.Address)
	if err != nil {
		return nil, err
	}
	kv := []string{forwardedBy, s.cfg.Node}
	if id := requestIDOf(ctx); id != "" {
		// The owner takes it as its own (requestID): one id in both
		// nodes' audit lines.
		kv = append(kv, RequestIDHeader, id)
	}
	return &ownerCall{node: node, client: c, ctx: metadata.AppendToOutgoingContext(ctx, kv...)}, nil
}

// forwarded is a stream forwarded to an owner, as relay reads it.
type forwarded[M any] interface {
	Recv() (M, error)
	Trailer() metadata.MD
}

// relay copies a forwarded stream (what: "exec", "log stream") to the caller's
// until it ends. The owner's status is passed on as it sent it; a stream
// that broke without one (no answeredBy trailer) is reported as the
// owner's going away, by name: the caller reached this node, and would
// otherwise take this node (self) for the one that failed.
func relay[M any](o *ownerCall, self, what string, recv forwarded[M], send func(M) error) error {
	for {
		m, err := recv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return o.failed(self, what, err, recv.Trailer())
		}
		if err := send(m); err != nil {
			return err
		}
	}
}

// failed is the error of a forwarded call that ended with err and
// trailer: the owner's status as it sent it, or, when there is none (no
// answeredBy trailer), the owner's going away, by name.
func (o *ownerCall) failed(self, what string, err error, trailer metadata.MD) error {
	if o.ctx.Err() == nil && status.Code(err) == codes.Unavailable && len(trailer.Get(answeredBy)) == 0 {
		return &shoal.Error{Kind: shoal.KindUnavailable, OwnerGone: o.node,
			Msg: fmt.Sprintf("owner node %s went away during the %s (served by node %s): %s", o.node, what, self, status.Convert(err).Message())}
	}
	return err
}
