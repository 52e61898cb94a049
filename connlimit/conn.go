package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is an accepted connection, pending until establish.
type conn struct {
	net.Conn
	l        *Listener
	src      string
	deadline time.Time   // of the handshake
	timer    *time.Timer // closes c at deadline; set under l.mu

	closeOnce sync.Once
}

// establish ends c's pending state: the server is past its handshake.
func (c *conn) establish() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leavePending(c) {
		l.stats.Established++
	}
}

// expire closes c if it is still pending at its deadline.
func (c *conn) expire() {
	defer c.l.timers.Done()
	c.Close() // a no-op for the accounting if c is past its handshake
}

// Close closes the connection and ends its accounting. A pending
// connection closed at or past its deadline timed out, whoever closes it:
// the listener's timer, or the server at its own deadline (grpc's
// ConnectionTimeout).
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		now := time.Now()
		l := c.l
		l.mu.Lock()
		if l.leavePending(c) && !now.Before(c.deadline) {
			l.stats.TimedOut++
		}
		l.open--
		l.mu.Unlock()
	})
	return c.Conn.Close()
}

// prefaceLen is the length of the HTTP/2 client preface ("PRI *
// HTTP/2.0\r\n\r\nSM\r\n\r\n"), the first bytes a gRPC client sends once
// its transport is secured.
const prefaceLen = 24

// prefaceConn is the connection the server reads through after the
// transport credentials' handshake; its first prefaceLen bytes establish
// the raw connection under it.
type prefaceConn struct {
	net.Conn
	raw  *conn
	read atomic.Int64 // bytes read, until prefaceLen
}

func (p *prefaceConn) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if n > 0 && p.read.Load() < prefaceLen {
		if p.read.Add(int64(n)) >= prefaceLen {
			p.raw.establish()
		}
	}
	return n, err
}
