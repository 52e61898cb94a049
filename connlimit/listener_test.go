package connlimit_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"shoal/connlimit"
	"shoal/internal/testenv"
	"shoal/pki"
)

// server is a gRPC server (the health service) on a connlimit.Listener.
type server struct {
	l     *connlimit.Listener
	addr  string
	creds func() credentials.TransportCredentials // the clients'
}

// serve starts a server on loopback with cfg, over mutual TLS (a CA and a
// node certificate of pki.Init) or plaintext; it stops when the test ends.
func serve(t *testing.T, cfg connlimit.Config, secure bool) *server {
	t.Helper()
	var tr *pki.Transport
	if secure {
		dir := t.TempDir()
		if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
		f := pki.Files{Cert: dir + "/n1.crt", Key: dir + "/n1.key", CA: dir + "/ca.crt"}
		var err error
		if tr, err = f.Transport(); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := connlimit.Wrap(raw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(l.ServerOptions(tr.ServerCreds())...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- gs.Serve(l) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &server{l: l, addr: raw.Addr().String(), creds: tr.DialCreds}
}

// dialFrom dials addr from the loopback address src (127.0.0.1,
// 127.0.0.2, ...: each a source of its own).
func dialFrom(ctx context.Context, src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// idle opens a connection from src that sends nothing (or what it is
// given); it is closed when the test ends. Nil: the server reset it before
// the dial returned (refused at once).
func (s *server) idle(t *testing.T, src string, send ...[]byte) net.Conn {
	t.Helper()
	c, err := dialFrom(context.Background(), src, s.addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, b := range send {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// client is a gRPC client of s from src; closed when the test ends.
func (s *server) client(t *testing.T, src string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(s.creds()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialFrom(ctx, src, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// call makes one health check on cc.
func call(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// waitStats polls l until cond holds (generous deadline: a loaded machine).
func waitStats(t *testing.T, l *connlimit.Listener, what string, cond func(connlimit.Stats) bool) connlimit.Stats {
	t.Helper()
	var st connlimit.Stats
	testenv.Eventually(t, 30*time.Second, what, func() (bool, error) {
		st = l.Stats()
		return cond(st), fmt.Errorf("stats %+v", st)
	})
	return st
}

// closedByServer reports whether the server closed c (reads end in EOF or
// a reset; a plaintext gRPC server writes its settings first), waiting up
// to 30s. A nil c was reset before its dial returned.
func closedByServer(c net.Conn) bool {
	if c == nil {
		return true
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

var sources = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}

// One source holds at most its cap of pending connections: past it, its
// connections are closed at once and counted, and so is a gRPC client's
// from that address; other addresses are still served. A slot freed by
// a closed connection serves that address again.
func TestPerSourceCap(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			s := serve(t, connlimit.Config{MaxPending: 64, MaxPendingPerSource: 4, HandshakeTimeout: time.Minute}, secure)
			var held []net.Conn
			for range 10 {
				held = append(held, s.idle(t, sources[0]))
			}
			st := waitStats(t, s.l, "4 pending, 6 refused", func(st connlimit.Stats) bool { return st.Pending == 4 && st.RefusedSource == 6 })
			if st.RefusedTotal != 0 || !st.SaturatedSince.IsZero() {
				t.Fatalf("a source's cap counted as the total's: %+v", st)
			}
			// The first four are held; the six after them were closed.
			for i, c := range held[4:] {
				if !closedByServer(c) {
					t.Fatalf("connection %d over the source cap is open", 4+i)
				}
			}
			if err := call(s.client(t, sources[1])); err != nil {
				t.Fatalf("another source while the first is at its cap: %v", err)
			}
			if err := call(s.client(t, sources[0])); err == nil {
				t.Fatal("a client of the source at its cap was served")
			}
			held[0].Close()
			waitStats(t, s.l, "a slot freed", func(st connlimit.Stats) bool { return st.Pending == 3 })
			if err := call(s.client(t, sources[0])); err != nil {
				t.Fatalf("the source after a slot freed: %v", err)
			}
		})
	}
}

// The total cap holds across sources; reaching it saturates the listener,
// which stays saturated until the pending connections fall to three
// quarters of the cap.
func TestTotalCapAndSaturation(t *testing.T) {
	s := serve(t, connlimit.Config{MaxPending: 8, MaxPendingPerSource: 8, HandshakeTimeout: time.Minute}, true)
	var held []net.Conn
	for i := range 8 {
		held = append(held, s.idle(t, sources[i%2]))
	}
	st := waitStats(t, s.l, "8 pending", func(st connlimit.Stats) bool { return st.Pending == 8 })
	if st.SaturatedSince.IsZero() {
		t.Fatalf("at the total cap, not saturated: %+v", st)
	}
	over := s.idle(t, sources[2])
	waitStats(t, s.l, "one refused for the total", func(st connlimit.Stats) bool { return st.RefusedTotal == 1 })
	if !closedByServer(over) {
		t.Fatal("the connection over the total cap is open")
	}
	held[0].Close()
	st = waitStats(t, s.l, "7 pending", func(st connlimit.Stats) bool { return st.Pending == 7 })
	if st.SaturatedSince.IsZero() {
		t.Fatalf("saturation ended at 7 of 8: %+v", st)
	}
	held[1].Close()
	st = waitStats(t, s.l, "6 pending", func(st connlimit.Stats) bool { return st.Pending == 6 })
	if !st.SaturatedSince.IsZero() {
		t.Fatalf("still saturated at 6 of 8: %+v", st)
	}
}

// A connection still short of its handshake at the deadline is closed: one
// that sends nothing, one that sends part of the HTTP/2 preface, over TLS
// one that sends part of a ClientHello. Over TLS a whole preface in the
// clear, or a client without a certificate, fails the handshake and is
// closed at once: neither is ever counted as established.
func TestHandshakeDeadline(t *testing.T) {
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	t.Run("plaintext", func(t *testing.T) {
		s := serve(t, connlimit.Config{MaxPending: 64, MaxPendingPerSource: 64, HandshakeTimeout: 200 * time.Millisecond}, false)
		a, b := s.idle(t, sources[0]), s.idle(t, sources[0], preface[:10])
		for _, c := range []net.Conn{a, b} {
			if !closedByServer(c) {
				t.Fatal("an idle connection outlived the handshake deadline")
			}
		}
		st := waitStats(t, s.l, "both timed out", func(st connlimit.Stats) bool { return st.TimedOut == 2 && st.Open == 0 })
		if st.Established != 0 {
			t.Fatalf("established without a preface: %+v", st)
		}
	})
	t.Run("tls", func(t *testing.T) {
		s := serve(t, connlimit.Config{MaxPending: 64, MaxPendingPerSource: 64, HandshakeTimeout: 200 * time.Millisecond}, true)
		partial := s.idle(t, sources[0], []byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a handshake record's header, 512 bytes announced
		if !closedByServer(partial) {
			t.Fatal("a partial ClientHello outlived the handshake deadline")
		}
		waitStats(t, s.l, "the partial ClientHello timed out", func(st connlimit.Stats) bool { return st.TimedOut == 1 })
		if !closedByServer(s.idle(t, sources[0], preface)) {
			t.Fatal("a plaintext preface on TLS was kept")
		}
		raw, err := dialFrom(context.Background(), sources[0], s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		// TLS 1.3: the client learns of the refused certificate on its
		// first read.
		if err := tc.Handshake(); err == nil {
			_, err = tc.Read(make([]byte, 1))
			if err == nil {
				t.Fatal("a TLS client without a certificate was answered")
			}
		}
		st := waitStats(t, s.l, "both gone", func(st connlimit.Stats) bool { return st.Open == 0 && st.Pending == 0 })
		if st.Established != 0 {
			t.Fatalf("established without a client certificate: %+v", st)
		}
	})
}

// Connections past the handshake do not count: with caps of one, two gRPC
// clients from one address are served in turn, an idle connection then
// takes the one slot and times out, and the first client's connection,
// established before it, still serves without reconnecting.
func TestEstablishedDoNotCount(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			s := serve(t, connlimit.Config{MaxPending: 1, MaxPendingPerSource: 1, HandshakeTimeout: time.Second}, secure)
			first := s.client(t, sources[0])
			if err := call(first); err != nil {
				t.Fatal(err)
			}
			if err := call(s.client(t, sources[0])); err != nil {
				t.Fatalf("a second client beside an established one: %v", err)
			}
			st := waitStats(t, s.l, "two established", func(st connlimit.Stats) bool { return st.Established == 2 && st.Pending == 0 })
			if st.Open != 2 {
				t.Fatalf("open %d, want 2: %+v", st.Open, st)
			}
			idle := s.idle(t, sources[0])
			if !closedByServer(idle) {
				t.Fatal("the idle connection was not closed")
			}
			waitStats(t, s.l, "the idle one timed out", func(st connlimit.Stats) bool { return st.TimedOut == 1 })
			if err := call(first); err != nil {
				t.Fatalf("the established client after the deadline: %v", err)
			}
			if st := s.l.Stats(); st.Accepted != 3 || st.Open != 2 {
				t.Fatalf("accepted %d (want 3: no reconnect), open %d (want 2): %+v", st.Accepted, st.Open, st)
			}
		})
	}
}

// Close closes the pending connections and returns once their deadlines'
// functions are done; Accept then fails.
func TestCloseEndsPending(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := connlimit.Wrap(raw, connlimit.Config{MaxPending: 8, MaxPendingPerSource: 8, HandshakeTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Pending != 0 || st.Open != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	if !closedByServer(c) {
		t.Fatal("a pending connection survived Close")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Refusals are logged once per LogEvery at most, with their count.
func TestRefusalsLogRateLimited(t *testing.T) {
	var buf syncBuffer
	start := time.Now()
	s := serve(t, connlimit.Config{MaxPending: 64, MaxPendingPerSource: 1, HandshakeTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))}, false)
	const n = 50
	for range n + 1 {
		s.idle(t, sources[0])
	}
	waitStats(t, s.l, "all refused", func(st connlimit.Stats) bool { return st.RefusedSource == n })
	lines := strings.Count(buf.String(), "refused connections over the pending-connection cap")
	if limit := 1 + int(time.Since(start)/connlimit.LogEvery); lines < 1 || lines > limit {
		t.Fatalf("%d log lines for %d refusals, want 1..%d:\n%s", lines, n, limit, buf.String())
	}
	if !strings.Contains(buf.String(), "last_source=127.0.0.1") {
		t.Fatalf("the log does not name the source:\n%s", buf.String())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  connlimit.Config
		want string
	}{
		{connlimit.Config{MaxPending: 0, MaxPendingPerSource: 1, HandshakeTimeout: time.Second}, "max pending connections: 0"},
		{connlimit.Config{MaxPending: 1, MaxPendingPerSource: -1, HandshakeTimeout: time.Second}, "per source: -1"},
		{connlimit.Config{MaxPending: 1, MaxPendingPerSource: 1}, "handshake timeout: 0s"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	l, err := connlimit.Wrap(raw, connlimit.Config{MaxPending: 4, MaxPendingPerSource: 128, HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.MaxPendingPerSource != 4 {
		t.Fatalf("per-source cap above the total: %d, want 4", st.MaxPendingPerSource)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
