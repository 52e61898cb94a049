package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"shoal/chaos/tcpproxy"
)

// echo serves a line echo on a loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialFrom connects to addr from the loopback address ip (any of
// 127.0.0.0/8 is local on Linux), so the proxy can tell sources apart.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip reports whether a line comes back through c.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echoed " + line)
	}
	return nil
}

// SetBlocked cuts and refuses one source's connections and leaves the
// others alone; unblocked, the source connects again.
func TestSetBlocked(t *testing.T) {
	p, err := tcpproxy.Start(echo(t), tcpproxy.WithSource(func(c net.Conn) string {
		return c.RemoteAddr().(*net.TCPAddr).IP.String()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b := dialFrom(t, "127.0.0.2", p.Addr()), dialFrom(t, "127.0.0.3", p.Addr())
	for _, c := range []net.Conn{a, b} {
		if err := roundTrip(c); err != nil {
			t.Fatalf("before the block: %v", err)
		}
	}

	p.SetBlocked("127.0.0.2", true)
	if err := roundTrip(a); err == nil {
		t.Fatal("a blocked source's open connection still works")
	}
	if err := roundTrip(dialFrom(t, "127.0.0.2", p.Addr())); err == nil {
		t.Fatal("a blocked source's new connection works")
	}
	if err := roundTrip(b); err != nil {
		t.Fatalf("another source's connection after the block: %v", err)
	}
	if err := roundTrip(dialFrom(t, "127.0.0.3", p.Addr())); err != nil {
		t.Fatalf("another source's new connection after the block: %v", err)
	}

	p.SetBlocked("127.0.0.2", false)
	if err := roundTrip(dialFrom(t, "127.0.0.2", p.Addr())); err != nil {
		t.Fatalf("after unblocking: %v", err)
	}

	// SetDown refuses every source.
	p.SetDown(true)
	if err := roundTrip(b); err == nil {
		t.Fatal("a connection survived SetDown")
	}
	if err := roundTrip(dialFrom(t, "127.0.0.3", p.Addr())); err == nil {
		t.Fatal("a new connection works while down")
	}
	p.SetDown(false)
	if err := roundTrip(dialFrom(t, "127.0.0.3", p.Addr())); err != nil {
		t.Fatalf("after SetDown(false): %v", err)
	}
}

// timedRoundTrip is how long a line takes to come back through c.
func timedRoundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	return time.Since(t0)
}

// SetSourceLatency slows one source's connections, both ways, and no
// other's; the delay line delays chunks without spacing them, so lines
// sent back to back come back one latency later, not one each.
func TestSetSourceLatency(t *testing.T) {
	p, err := tcpproxy.Start(echo(t), tcpproxy.WithListen("127.0.0.1:0"), tcpproxy.WithSource(func(c net.Conn) string {
		return c.RemoteAddr().(*net.TCPAddr).IP.String()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slow, fast := dialFrom(t, "127.0.0.2", p.Addr()), dialFrom(t, "127.0.0.3", p.Addr())
	const d = 100 * time.Millisecond
	p.SetSourceLatency("127.0.0.2", d)
	if rtt := timedRoundTrip(t, slow); rtt < 2*d {
		t.Fatalf("round trip of the slowed source: %s, want at least %s (both ways)", rtt, 2*d)
	}
	if rtt := timedRoundTrip(t, fast); rtt >= d {
		t.Fatalf("round trip of another source: %s, want under %s", rtt, d)
	}

	// Ten lines written at once: one latency each way in all, not ten.
	slow.SetDeadline(time.Now().Add(5 * time.Second))
	t0 := time.Now()
	r := bufio.NewReader(slow)
	for range 10 {
		if _, err := slow.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(t0); el > 2*d+4*d {
		t.Fatalf("ten back-to-back lines took %s through a %s delay line: chunks are spaced, not delayed", el, d)
	}

	p.SetSourceLatency("127.0.0.2", 0)
	if rtt := timedRoundTrip(t, dialFrom(t, "127.0.0.2", p.Addr())); rtt >= d {
		t.Fatalf("round trip after undoing the latency: %s, want under %s", rtt, d)
	}
}
