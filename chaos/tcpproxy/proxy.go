// Package tcpproxy is a fault-injecting TCP proxy: the chaos suite puts it
// between a node and etcd to add latency or cut the connection, the
// cluster harness (internal/testenv) puts one in front of each etcd member
// to partition a host from the rest, and the chaos hosts (chaos/hosts) put
// one in front of each voter's peer port to slow one voter's peer traffic.
package tcpproxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from a loopback port to an upstream address.
type Proxy struct {
	upstream string
	listen   string
	lis      net.Listener
	source   func(net.Conn) string
	// closing ends the dials of connections being set up when Close is
	// called: a dial to an upstream that vanished may hang for seconds.
	closing context.Context
	stop    context.CancelFunc

	mu         sync.Mutex
	latency    time.Duration
	srcLatency map[string]time.Duration
	down       bool
	blocked    map[string]bool
	conns      map[net.Conn]string // both ends of every pipe, by source

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

// WithListen listens on addr (host:port, port 0 for a free one) instead
// of a free loopback port.
func WithListen(addr string) Option {
	return func(p *Proxy) { p.listen = addr }
}

// Start listens on a free loopback port (or WithListen's address).
func Start(upstream string, opts ...Option) (*Proxy, error) {
	p := &Proxy{upstream: upstream, listen: "127.0.0.1:0", blocked: map[string]bool{},
		srcLatency: map[string]time.Duration{}, conns: map[net.Conn]string{}}
	for _, o := range opts {
		o(p)
	}
	var err error
	if p.lis, err = net.Listen("tcp", p.listen); err != nil {
		return nil, err
	}
	p.closing, p.stop = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// SetLatency delays every forwarded chunk by d, both ways. Chunks are
// delayed, not spaced: throughput stays what it was.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// SetSourceLatency delays every chunk of the connections from source (as
// WithSource names it), both ways, by d on top of SetLatency's; 0 undoes
// it. It applies to open connections from their next chunk on.
func (p *Proxy) SetSourceLatency(source string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		delete(p.srcLatency, source)
		return
	}
	p.srcLatency[source] = d
}

// latencyOf is the delay of a chunk from a connection of source now.
func (p *Proxy) latencyOf(source string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency + p.srcLatency[source]
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
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.DialContext(p.closing, "tcp", p.upstream)
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
	go p.pipe(c, up, source)
	go p.pipe(up, c, source)
}

// chunk is what one read got, and when it may be written on.
type chunk struct {
	buf *[]byte
	n   int
	due time.Time
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pipe copies src to dst through a delay line: this goroutine reads and
// stamps each chunk with its due time (now + the latency), a writer
// goroutine writes it once due, so that latency delays chunks without
// spacing them. When either side ends or is cut both are closed.
func (p *Proxy) pipe(dst, src net.Conn, source string) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	line := make(chan chunk, 64)
	written := make(chan struct{})
	go func() {
		defer close(written)
		failed := false
		for c := range line {
			if !failed {
				if d := time.Until(c.due); d > 0 {
					time.Sleep(d) // injected latency: the fault itself, not synchronisation
				}
				if _, err := dst.Write((*c.buf)[:c.n]); err != nil {
					// Unblock the reader; keep draining so it never
					// waits on a full line.
					failed = true
					src.Close()
				}
			}
			bufs.Put(c.buf)
		}
	}()
	defer func() { close(line); <-written }()
	for {
		buf := bufs.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 {
			line <- chunk{buf: buf, n: n, due: time.Now().Add(p.latencyOf(source))}
		} else {
			bufs.Put(buf)
		}
		if err != nil {
			return // io.EOF or a cut connection: close both sides
		}
	}
}

// Close stops accepting, cuts every connection and waits for the pipes.
func (p *Proxy) Close() error {
	err := p.lis.Close()
	p.stop()
	p.mu.Lock()
	p.down = true // a connection being set up now is refused
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
