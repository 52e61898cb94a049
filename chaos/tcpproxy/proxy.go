// Package tcpproxy is a fault-injecting TCP proxy: the chaos suite puts it
// between a node and etcd to add latency or cut the connection, and the
// cluster harness (internal/testenv) puts one in front of each etcd member
// to partition a host from the rest.
package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from a loopback port to an upstream address.
type Proxy struct {
	upstream string
	lis      net.Listener
	source   func(net.Conn) string

	mu      sync.Mutex
	latency time.Duration
	down    bool
	blocked map[string]bool
	conns   map[net.Conn]string // both ends of every pipe, by source

	wg sync.WaitGroup
}

// Option configures a Proxy at Start.
type Option func(*Proxy)

// WithSource names the source of each accepted connection, once, before
// anything is forwarded, so that SetBlocked can cut the connections of one
// source and refuse its new ones. The cluster harness names the node
// process that dialed. Connections it names "" are never blocked.
func WithSource(f func(accepted net.Conn) string) Option {
	return func(p *Proxy) { p.source = f }
}

// Start listens on a free loopback port.
func Start(upstream string, opts ...Option) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{upstream: upstream, lis: lis, blocked: map[string]bool{}, conns: map[net.Conn]string{}}
	for _, o := range opts {
		o(p)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// SetLatency delays every forwarded chunk by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// SetDown cuts every connection and refuses new ones while down.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// SetBlocked cuts every connection from source (as WithSource names it)
// and refuses the new ones while blocked; other sources are not touched.
func (p *Proxy) SetBlocked(source string, blocked bool) {
	if source == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !blocked {
		delete(p.blocked, source)
		return
	}
	p.blocked[source] = true
	for c, s := range p.conns {
		if s == source {
			c.Close()
		}
	}
}

// refused reports whether a connection from source may not pass now.
// Call with p.mu held.
func (p *Proxy) refused(source string) bool { return p.down || p.blocked[source] }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		// One goroutine a connection: naming the source and dialing
		// upstream must not hold up the next accept.
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve names c's source, dials upstream unless that source is refused,
// and pipes both ways until either side ends or is cut.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	var source string
	if p.source != nil {
		source = p.source(c)
	}
	p.mu.Lock()
	refused := p.refused(source)
	p.mu.Unlock()
	if refused {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	// Checked again with the pipe registered under the same lock: a cut
	// that came while dialing must not miss this connection.
	p.mu.Lock()
	if p.refused(source) {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = source, source
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pipe(c, up)
	go p.pipe(up, c)
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.latency
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d) // injected latency: the fault itself, not synchronisation
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a cut connection: close both sides
		}
	}
}

// Close stops accepting, cuts every connection and waits for the pipes.
func (p *Proxy) Close() error {
	err := p.lis.Close()
	p.mu.Lock()
	p.down = true // a connection being set up now is refused
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
