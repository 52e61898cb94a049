// Package tcpproxy is a fault-injecting TCP proxy: the chaos suite puts it
// between a node and etcd to add latency or cut the connection.
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

	mu      sync.Mutex
	latency time.Duration
	down    bool
	conns   map[net.Conn]struct{}

	wg sync.WaitGroup
}

// Start listens on a free loopback port.
func Start(upstream string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{upstream: upstream, lis: lis, conns: map[net.Conn]struct{}{}}
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

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
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
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
