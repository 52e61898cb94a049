package connlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Config, the node's --max-pending-conns,
// --max-pending-conns-per-source and --handshake-timeout.
const (
	DefaultMaxPending          = 1024
	DefaultMaxPendingPerSource = 128
	DefaultHandshakeTimeout    = 5 * time.Second
)

// LogEvery bounds how often refused connections are logged: one line per
// interval at most, with the count since the last line.
const LogEvery = 10 * time.Second

// Config of a Listener.
type Config struct {
	// MaxPending caps the connections accepted and not yet past their
	// handshake, from all sources together.
	MaxPending int
	// MaxPendingPerSource caps those of one source address (an IPv6 /64
	// is one source); above MaxPending it is MaxPending.
	MaxPendingPerSource int
	// HandshakeTimeout closes a connection still pending this long after
	// it was accepted.
	HandshakeTimeout time.Duration
	// Logger; nil logs nothing.
	Logger *slog.Logger
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.MaxPending <= 0 {
		return fmt.Errorf("max pending connections: %d; must be positive", c.MaxPending)
	}
	if c.MaxPendingPerSource <= 0 {
		return fmt.Errorf("max pending connections per source: %d; must be positive", c.MaxPendingPerSource)
	}
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("handshake timeout: %s; must be positive", c.HandshakeTimeout)
	}
	return nil
}

// Stats are a Listener's counts.
type Stats struct {
	// Pending: accepted, not yet past the handshake. Open: accepted and
	// not yet closed (pending or past the handshake).
	Pending, Open int
	// MaxPending and MaxPendingPerSource are the caps in force.
	MaxPending, MaxPendingPerSource int
	// Accepted: connections admitted since the start; Established: of
	// those, the ones that got past the handshake.
	Accepted, Established uint64
	// RefusedTotal and RefusedSource: connections closed at once because
	// the total cap, or their source's, was reached.
	RefusedTotal, RefusedSource uint64
	// TimedOut: connections closed still pending after HandshakeTimeout.
	TimedOut uint64
	// SaturatedSince is when the total cap was reached, zero when it is
	// not (see the package doc).
	SaturatedSince time.Time
}

// Listener is a net.Listener whose pending connections are bounded.
type Listener struct {
	inner    net.Listener
	cfg      Config
	log      *slog.Logger
	lowWater int // saturation ends at or below it

	// timers counts the handshake deadlines whose function may still run;
	// Close waits for them.
	timers sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	closed    bool
	pending   map[*conn]struct{}
	perSource map[string]int
	open      int
	stats     Stats
	// unlogged refusals since lastLog.
	unlogged int
	lastLog  time.Time
}

var _ net.Listener = (*Listener)(nil)

// Wrap bounds the pending connections of l. The Listener owns l: its Close
// closes l.
func Wrap(l net.Listener, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxPendingPerSource = min(cfg.MaxPendingPerSource, cfg.MaxPending)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{inner: l, cfg: cfg, log: log.With("subsystem", "connlimit", "addr", l.Addr().String()),
		lowWater: cfg.MaxPending * 3 / 4, pending: map[*conn]struct{}{}, perSource: map[string]int{}}, nil
}

// Addr is the wrapped listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Accept returns the next connection within the caps. Connections over a
// cap are closed here, so Accept returns only to serve one or on an error
// of the wrapped listener.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// refusal is what admit logs, outside the lock.
type refusal struct {
	n                int
	reason, source   string
	pending, perSrc  int
	maxTotal, maxSrc int
}

// admit counts c as pending and arms its deadline, or refuses it.
func (l *Listener) admit(c net.Conn) *conn {
	src := source(c.RemoteAddr())
	now := time.Now()
	l.mu.Lock()
	reason := ""
	switch {
	case l.closed:
		reason = "closed"
	case len(l.pending) >= l.cfg.MaxPending:
		reason = "total"
		l.stats.RefusedTotal++
		if l.stats.SaturatedSince.IsZero() {
			l.stats.SaturatedSince = now
		}
	case l.perSource[src] >= l.cfg.MaxPendingPerSource:
		reason = "source"
		l.stats.RefusedSource++
	}
	if reason != "" {
		var r *refusal
		if reason != "closed" {
			l.unlogged++
			if now.Sub(l.lastLog) >= LogEvery {
				r = &refusal{n: l.unlogged, reason: reason, source: src, pending: len(l.pending), perSrc: l.perSource[src],
					maxTotal: l.cfg.MaxPending, maxSrc: l.cfg.MaxPendingPerSource}
				l.unlogged, l.lastLog = 0, now
			}
		}
		l.mu.Unlock()
		// A reset rather than a FIN: nothing to say to it, and no
		// TIME_WAIT left behind for each of a flood's connections.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		if r != nil {
			l.log.Warn("refused connections over the pending-connection cap (accepted, not yet past the handshake)",
				"refused", r.n, "last_reason", r.reason, "last_source", r.source, "pending", r.pending, "pending_from_source", r.perSrc,
				"max_pending", r.maxTotal, "max_pending_per_source", r.maxSrc)
		}
		return nil
	}
	lc := &conn{Conn: c, l: l, src: src, deadline: now.Add(l.cfg.HandshakeTimeout)}
	l.pending[lc] = struct{}{}
	l.perSource[src]++
	l.open++
	l.stats.Accepted++
	if len(l.pending) >= l.cfg.MaxPending && l.stats.SaturatedSince.IsZero() {
		l.stats.SaturatedSince = now
	}
	l.timers.Add(1)
	lc.timer = time.AfterFunc(l.cfg.HandshakeTimeout, lc.expire)
	l.mu.Unlock()
	return lc
}

// leavePending ends c's pending state (to established or closed); l.mu
// held. It reports whether c was pending.
func (l *Listener) leavePending(c *conn) bool {
	if _, ok := l.pending[c]; !ok {
		return false
	}
	delete(l.pending, c)
	if l.perSource[c.src]--; l.perSource[c.src] <= 0 {
		delete(l.perSource, c.src)
	}
	if len(l.pending) <= l.lowWater {
		l.stats.SaturatedSince = time.Time{}
	}
	if c.timer.Stop() {
		l.timers.Done() // its function will not run
	}
	return true
}

// Stats returns the listener's counts now.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Pending, s.Open = len(l.pending), l.open
	s.MaxPending, s.MaxPendingPerSource = l.cfg.MaxPending, l.cfg.MaxPendingPerSource
	return s
}

// Close closes the wrapped listener and every pending connection, and
// waits for the handshake deadlines' functions. Connections past the
// handshake are their server's to close.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.inner.Close()
		l.mu.Lock()
		l.closed = true
		var pending []*conn
		for c := range l.pending {
			pending = append(pending, c)
		}
		l.mu.Unlock()
		for _, c := range pending {
			c.Close()
		}
		l.timers.Wait()
	})
	if errors.Is(l.closeErr, net.ErrClosed) {
		return nil
	}
	return l.closeErr
}

// source is the key of an address's per-source cap: its IP, or its /64
// for IPv6 (one host may hold a whole /64).
func source(a net.Addr) string {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		p, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return a.String()
		}
		ap = p
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}
