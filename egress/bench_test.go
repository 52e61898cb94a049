package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"shoal/egress/shim"
)

// benchPaths starts, for the benchmarks, the node's side (a Proxy on a
// unix socket, admitting 127.0.0.1 on upstreamPort by an IP rule) and the
// sandbox's side (a shim on 127.0.0.1 forwarding to that socket). It
// returns dialers of the three ways to upstreamPort: direct, through the
// proxy's socket, and through the shim and the proxy (the way a sandbox
// goes).
func benchPaths(b *testing.B, upstreamPort uint16) (direct, proxy, shimmed func() (net.Conn, *bufio.Reader, error)) {
	pols := &policyMap{}
	pols.set("sb", Policy{Rules: []Rule{{Host: "127.0.0.1", Ports: []uint16{upstreamPort}}}})
	sock := filepath.Join(b.TempDir(), "sb.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	serve(b, &Proxy{Policies: pols}, ln, "sb")
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { shim.Forward(ctx, sln, sock) })
	b.Cleanup(func() { cancel(); wg.Wait() })

	target := fmt.Sprintf("127.0.0.1:%d", upstreamPort)
	through := func(network, addr string) func() (net.Conn, *bufio.Reader, error) {
		return func() (net.Conn, *bufio.Reader, error) {
			c, err := net.Dial(network, addr)
			if err != nil {
				return nil, nil, err
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("CONNECT %s: %s", target, resp.Status)
			}
			if err != nil {
				c.Close()
				return nil, nil, err
			}
			return c, br, nil
		}
	}
	direct = func() (net.Conn, *bufio.Reader, error) {
		c, err := net.Dial("tcp", target)
		if err != nil {
			return nil, nil, err
		}
		return c, bufio.NewReader(c), nil
	}
	return direct, through("unix", sock), through("tcp", sln.Addr().String())
}

// upstream serves on 127.0.0.1 with serve for each connection, until the
// benchmark ends.
func upstream(b *testing.B, handle func(net.Conn)) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		shim.Serve(ctx, ln, func(_ context.Context, c net.Conn, _ *shim.Conns) { handle(c) })
	})
	b.Cleanup(func() { cancel(); wg.Wait() })
	return port(b, ln.Addr())
}

const throughputBytes = 1 << 30

// BenchmarkProxyThroughput: 1 GiB from an upstream on 127.0.0.1 to a
// client, each iteration three times: directly, through the proxy's unix
// socket (CONNECT), and through the shim and the proxy (the sandbox's
// way). Reports each path's MB/s and the ratios to direct (the issue's
// goal: >= 0.9).
//
//	go test -run '^$' -bench ProxyThroughput -benchtime 3x ./egress/
func BenchmarkProxyThroughput(b *testing.B) {
	chunk := make([]byte, 1<<20)
	port := upstream(b, func(c net.Conn) {
		for sent := 0; sent < throughputBytes; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	paths := []struct {
		name string
		dial func() (net.Conn, *bufio.Reader, error)
		secs float64
	}{{name: "direct"}, {name: "proxy"}, {name: "shim+proxy"}}
	paths[0].dial, paths[1].dial, paths[2].dial = benchPaths(b, port)
	buf := make([]byte, 1<<20)
	b.ResetTimer()
	for b.Loop() {
		for i := range paths {
			start := time.Now()
			c, br, err := paths[i].dial()
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			// What the proxy's answer left buffered, then the rest.
			if k := br.Buffered(); k > 0 {
				p, _ := br.Peek(k)
				n += int64(len(p))
			}
			for {
				k, err := c.Read(buf)
				n += int64(k)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if n != throughputBytes {
				b.Fatalf("%s: read %d bytes, want %d", paths[i].name, n, throughputBytes)
			}
			paths[i].secs += time.Since(start).Seconds()
		}
	}
	iters := float64(b.N)
	mbps := func(s float64) float64 { return throughputBytes * iters / s / 1e6 }
	for _, p := range paths {
		b.ReportMetric(mbps(p.secs), p.name+"-MB/s")
	}
	b.ReportMetric(paths[0].secs/paths[1].secs, "proxy/direct")
	b.ReportMetric(paths[0].secs/paths[2].secs, "shim+proxy/direct")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkProxyConnectSetup: the time from dialling to the first byte
// echoed back, directly and through the proxy, one sample of each path an
// iteration; reports the p50 and p99 of each path and the p99 overhead
// of the proxied paths over direct (the goal: <= 2 ms).
//
//	go test -run '^$' -bench ProxyConnectSetup -benchtime 2000x ./egress/
func BenchmarkProxyConnectSetup(b *testing.B) {
	port := upstream(b, func(c net.Conn) { io.Copy(c, c) })
	direct, proxy, shimmed := benchPaths(b, port)
	dials := []func() (net.Conn, *bufio.Reader, error){direct, proxy, shimmed}
	names := []string{"direct", "proxy", "shim+proxy"}
	samples := make([][]time.Duration, len(dials))
	one := make([]byte, 1)
	b.ResetTimer()
	for b.Loop() {
		for i, dial := range dials {
			start := time.Now()
			c, br, err := dial()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write([]byte{'x'}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(br, one); err != nil {
				b.Fatal(err)
			}
			samples[i] = append(samples[i], time.Since(start))
			c.Close()
		}
	}
	pct := func(s []time.Duration, q float64) float64 {
		s = slices.Clone(s)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds())
	}
	for i, name := range names {
		b.ReportMetric(pct(samples[i], 0.50), name+"-p50-µs")
		b.ReportMetric(pct(samples[i], 0.99), name+"-p99-µs")
	}
	for i := 1; i < len(names); i++ {
		b.ReportMetric(pct(samples[i], 0.50)-pct(samples[0], 0.50), names[i]+"-overhead-p50-µs")
		b.ReportMetric(pct(samples[i], 0.99)-pct(samples[0], 0.99), names[i]+"-overhead-p99-µs")
	}
	b.ReportMetric(0, "ns/op")
}
