package apiserver

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Any node serves any call: a call that needs a sandbox's container (exec,
// logs) is served by the node that owns it (spec.node), and a node that
// does not own the sandbox forwards the call to the owner's advertised
// address and relays the stream as it comes, exit code included. Only the
// owner's agent and API touch its engine.

// forwardedBy marks a forwarded call with the forwarding node's id: the
// owner serves it locally or refuses it, never forwards it again.
const forwardedBy = "shoal-forwarded-by"

// peers caches one client connection per peer address.
type peers struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (p *peers) client(addr string) (shoalv1.ShoalClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return shoalv1.NewShoalClient(c), nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes), grpc.MaxCallSendMsgSize(MaxRequestBytes)))
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

// owner returns the client of the node that owns sb, or nil when it is
// this node.
func (s *Server) owner(ctx context.Context, sb *shoalv1.Sandbox) (shoalv1.ShoalClient, context.Context, error) {
	node := store.NodeOf(sb)
	if node == "" || node == s.cfg.Node {
		return nil, ctx, nil
	}
	name := sb.GetMeta().GetName()
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(forwardedBy)) > 0 {
		return nil, nil, shoal.FailedPrecondition("sandbox %q belongs to node %q, and node %q was asked for it by node %q: their registry entries disagree",
			name, node, s.cfg.Node, md.Get(forwardedBy)[0])
	}
	n, err := s.cfg.Store.GetNode(ctx, node)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return nil, nil, shoal.Unavailable("sandbox %q belongs to node %q, which is not in the node registry", name, node)
	}
	if err != nil {
		return nil, nil, err
	}
	if !n.GetStatus().GetReady() {
		seen := "its liveness lease expired"
		if t := n.GetStatus().GetLastSeen(); t != nil {
			seen = fmt.Sprintf("last seen %s ago", time.Since(t.AsTime()).Round(time.Second))
		}
		return nil, nil, shoal.Unavailable("sandbox %q runs on node %q, which is NotReady (%s); try again when it is back", name, node, seen)
	}
	c, err := s.peers.client(n.Address)
	if err != nil {
		return nil, nil, err
	}
	return c, metadata.AppendToOutgoingContext(ctx, forwardedBy, s.cfg.Node), nil
}

// relay copies a forwarded stream to the caller's until it ends.
func relay[M any](recv func() (M, error), send func(M) error) error {
	for {
		m, err := recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err // the owner's status, as it sent it
		}
		if err := send(m); err != nil {
			return err
		}
	}
}
