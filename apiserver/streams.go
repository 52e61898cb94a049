package apiserver

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"shoal"
	"shoal/pki"
)

// Default stream caps; node.Config sets them from --max-watches and
// --max-execs. A watch costs about three goroutines and 40 KiB (3000 of
// them took a node from 97 to 9100 goroutines and 91 to 230 MB); an exec
// or a follow holds a connection to the engine and a copy loop.
const (
	DefaultMaxWatches = 1000
	DefaultMaxExecs   = 100
	// DefaultMaxStreamsPerClient caps one client certificate's open
	// streams from one host on a node (mutual TLS only: a plaintext node serves
	// loopback, where every client has the same address).
	DefaultMaxStreamsPerClient = 256
)

// streamCap bounds how many streams of one kind are served at once. Each
// watch holds an etcd watch and a few goroutines, each exec or follow a
// connection to the engine: without a cap, thousands of idle clients pin
// a node's memory (3000 watches: 9100 goroutines, 230 MB).
type streamCap struct {
	slots      chan struct{}
	what, flag string
}

func newStreamCap(n int, what, flag string) *streamCap {
	return &streamCap{slots: make(chan struct{}, n), what: what, flag: flag}
}

// acquire takes a slot or refuses at once with RESOURCE_EXHAUSTED: a
// client that waited for a slot would hold a connection all the same.
func (c *streamCap) acquire() (release func(), err error) {
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	default:
		return nil, shoal.ResourceExhausted("this node already serves %d %s, its cap (--%s); retry later, close some, or start the node with a higher --%s",
			cap(c.slots), c.what, c.flag, c.flag)
	}
}

// errShuttingDown ends streams and waits when the node shuts down.
var errShuttingDown = shoal.Unavailable("the node is shutting down; retry, or reconnect to another node")

// Shutdown ends every open stream and wait at once, with UNAVAILABLE, so
// that grpc.Server.GracefulStop does not wait for clients that would never
// leave. New streams end as soon as they start. Unary calls are not
// touched: they are short, and cutting a write short would leave its
// client unsure whether it happened.
func (s *Server) Shutdown() {
	s.shutdown(errShuttingDown)
	s.peers.close()
}

// bindShutdown returns a context that ends with ctx or at Shutdown,
// whichever is first; its cause is errShuttingDown in the second case.
func (s *Server) bindShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// boundStream is a server stream whose Context also ends at Shutdown.
type boundStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (b *boundStream) Context() context.Context { return b.ctx }

// clientStreams caps the streams one client holds open at once (every
// stream: watches, exec, logs, snapshots), so that one client cannot take
// a node's whole --max-watches or --max-execs. A client is its
// certificate's subject on one host, its address (mutual TLS only: without
// it a node serves loopback or a private test network, and cannot tell a
// node forwarding its clients' calls from a client); other nodes (role node,
// forwarding their own clients' calls) are not capped here.
type clientStreams struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func (c *clientStreams) acquire(ctx context.Context, secure bool) (release func(), err error) {
	if c == nil || c.max <= 0 {
		return func() {}, nil
	}
	if !secure {
		return func() {}, nil
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if id.Role == pki.RoleNode {
		return func() {}, nil
	}
	key := id.Subject
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		// A client is a certificate on one host: the holders of one
		// role's certificate on many hosts do not share one cap.
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			// An IPv6 host may hold a whole /64: one client.
			if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
				host = (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
			}
			key += " at " + host
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= c.max {
		return nil, shoal.ResourceExhausted("this client (%s) already holds %d open streams on this node, its cap per client (--max-streams-per-client); close some, or spread them over other nodes",
			key, c.max)
	}
	c.n[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[key]--; c.n[key] <= 0 {
			delete(c.n, key)
		}
	}, nil
}
