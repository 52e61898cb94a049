package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver maps names to addresses: the tests' stand-in for DNS.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// policyMap is a Policies a test changes while the proxy serves.
type policyMap struct {
	mu sync.Mutex
	m  map[string]Policy
}

func (pm *policyMap) Policy(_ context.Context, sandbox string) (Policy, bool, error) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	p, ok := pm.m[sandbox]
	return p, ok, nil
}

func (pm *policyMap) set(sandbox string, p Policy) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if pm.m == nil {
		pm.m = make(map[string]Policy)
	}
	pm.m[sandbox] = p
}

// recorder keeps the proxy's decisions.
type recorder struct {
	mu  sync.Mutex
	all []Decision
}

func (r *recorder) record(d Decision) {
	r.mu.Lock()
	r.all = append(r.all, d)
	r.mu.Unlock()
}

// last is the latest decision. The proxy reports a decision before it
// answers, so a client that has read its answer finds it here.
func (r *recorder) last(t *testing.T) Decision {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) == 0 {
		t.Fatal("no decision recorded")
	}
	return r.all[len(r.all)-1]
}

// upstreams stand in for the internet: an HTTP and a TLS server that
// count their requests, and a TCP echo server, all on 127.0.0.1.
type upstreams struct {
	http, tls  *httptest.Server
	hits       atomic.Int64
	echo       net.Listener
	httpPort   uint16
	tlsPort    uint16
	echoPort   uint16
	echoClosed sync.WaitGroup
}

func startUpstreams(t *testing.T) *upstreams {
	u := &upstreams{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "path=%s host=%s body=%d proxy-auth=%q", r.URL.RequestURI(), r.Host, len(body), r.Header.Get("Proxy-Authorization"))
	})
	u.http = httptest.NewServer(h)
	t.Cleanup(u.http.Close)
	u.tls = httptest.NewUnstartedServer(h)
	u.tls.Config.ErrorLog = log.New(io.Discard, "", 0) // tunnels the tests cut
	u.tls.StartTLS()
	t.Cleanup(u.tls.Close)
	u.httpPort = port(t, u.http.Listener.Addr())
	u.tlsPort = port(t, u.tls.Listener.Addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.echo = ln
	u.echoPort = port(t, ln.Addr())
	u.echoClosed.Go(func() {
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); u.echoClosed.Wait() })
	return u
}

func port(t testing.TB, a net.Addr) uint16 {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

// serve runs p.Serve for sandbox on ln until the test ends, and checks
// that it returns.
func serve(t testing.TB, p *Proxy, ln net.Listener, sandbox string) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln, sandbox) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Serve did not return within 10 s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return stop
}

type env struct {
	u        *upstreams
	pols     *policyMap
	rec      *recorder
	proxy    *Proxy
	addr     string // the proxy's listener for sandbox "sb"
	stop     func() error
	fenced   atomic.Bool
	tlsConf  *tls.Config
	resolver fakeResolver
}

// newEnv starts the upstreams and a proxy for sandbox "sb" on a TCP
// listener, with a policy admitting allowed.test on the TLS and echo
// ports (CIDR 127.0.0.0/8, so that its loopback address passes the SSRF
// check) and on the HTTP port.
func newEnv(t *testing.T) *env {
	e := &env{u: startUpstreams(t), pols: &policyMap{}, rec: &recorder{}}
	e.resolver = fakeResolver{
		"allowed.test": addrs("127.0.0.1"),
		"other.test":   addrs("127.0.0.1"),
		"loop.test":    addrs("127.0.0.1"),
		"meta.test":    addrs("169.254.169.254"),
		"zero.test":    addrs("0.0.0.0"),
	}
	e.proxy = &Proxy{
		Policies:    e.pols,
		Resolver:    e.resolver,
		OnDecision:  e.rec.record,
		Fenced:      e.fenced.Load,
		DialTimeout: 2 * time.Second,
	}
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	e.pols.set("sb", Policy{Version: 1, Rules: []Rule{
		{Host: "allowed.test", Ports: []uint16{e.u.tlsPort, e.u.echoPort}, CIDRs: loop},
		{Host: "allowed.test", Ports: []uint16{e.u.httpPort}, CIDRs: loop},
		{Host: "loop.test", Ports: []uint16{e.u.tlsPort}},
		{Host: "meta.test", Ports: []uint16{80}},
		{Host: "zero.test", Ports: []uint16{e.u.tlsPort}, CIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
		{Host: "nxdomain.test", Ports: []uint16{443}},
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.stop = serve(t, e.proxy, ln, "sb")
	pool := x509.NewCertPool()
	pool.AddCert(e.u.tls.Certificate())
	e.tlsConf = &tls.Config{RootCAs: pool, ServerName: "example.com"}
	return e
}

// client is an HTTP client whose every request goes through the proxy.
func (e *env) client(proxyUser bool) *http.Client {
	pu := &url.URL{Scheme: "http", Host: e.addr}
	if proxyUser {
		pu.User = url.UserPassword("user", "secret")
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(pu),
			TLSClientConfig:   e.tlsConf,
			DisableKeepAlives: true,
		},
	}
}

func get(t *testing.T, c *http.Client, u string) (string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %s: %s", resp.Status, b)
	}
	return string(b), err
}

// connect opens a CONNECT tunnel to target through the proxy at addr
// (dialled with network), and returns the connection and the proxy's
// answer; the body is read for a refusal.
func connect(t *testing.T, network, addr, target string) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	var body string
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	c.SetDeadline(time.Time{})
	return c, br, resp.StatusCode, body
}

func echoOnce(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("tunnel write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Fatalf("tunnel echo = %q, %v; want %q", got, err, msg)
	}
}

func TestProxyConnectTLS(t *testing.T) {
	e := newEnv(t)
	body, err := get(t, e.client(false), fmt.Sprintf("https://allowed.test:%d/x", e.u.tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "path=/x") {
		t.Fatalf("body %q", body)
	}
	d := e.rec.last(t)
	want := Decision{Sandbox: "sb", Host: "allowed.test", Port: e.u.tlsPort, Verdict: VerdictAdmit, Rule: 0,
		Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.u.tlsPort), PolicyVersion: 1, Connect: true}
	if d != want {
		t.Fatalf("decision %+v, want %+v", d, want)
	}
}

func TestProxyForwardHTTP(t *testing.T) {
	e := newEnv(t)
	c := e.client(true) // Proxy-Authorization is the proxy's, never forwarded
	body, err := get(t, c, fmt.Sprintf("http://allowed.test:%d/p?q=1", e.u.httpPort))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`path=/p?q=1 host=allowed.test:%d body=0 proxy-auth=""`, e.u.httpPort)
	if body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	d := e.rec.last(t)
	if d.Verdict != VerdictAdmit || d.Rule != 1 || d.Connect {
		t.Fatalf("decision %+v", d)
	}
	resp, err := c.Post(fmt.Sprintf("http://allowed.test:%d/up", e.u.httpPort), "application/octet-stream", strings.NewReader(strings.Repeat("x", 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "body=1048576") {
		t.Fatalf("POST answered %q", b)
	}
}

func TestProxyRefusals(t *testing.T) {
	e := newEnv(t)
	tls, http_ := strconv.Itoa(int(e.u.tlsPort)), strconv.Itoa(int(e.u.httpPort))
	for _, tc := range []struct {
		name, target string
		code         int
		verdict      Verdict
		reason       string
	}{
		{"disallowed host", "other.test:" + tls, 403, VerdictRefuse, "no rule admits other.test:" + tls},
		{"disallowed port", "allowed.test:22", 403, VerdictRefuse, "no rule admits allowed.test:22"},
		{"name resolving to loopback", "loop.test:" + tls, 403, VerdictRefuse, "address 127.0.0.1 is loopback (SSRF)"},
		{"name resolving to the metadata address", "meta.test:80", 403, VerdictRefuse, "address 169.254.169.254 is link-local (SSRF)"},
		{"name resolving to 0.0.0.0", "zero.test:" + tls, 403, VerdictRefuse, "unspecified address 0.0.0.0"},
		{"loopback literal", "127.0.0.1:" + tls, 403, VerdictRefuse, "no rule admits 127.0.0.1:" + tls},
		{"metadata literal", "169.254.169.254:80", 403, VerdictRefuse, "no rule admits"},
		{"mapped loopback literal", "[::ffff:127.0.0.1]:" + tls, 403, VerdictRefuse, "no rule admits 127.0.0.1:" + tls},
		{"unresolvable", "nxdomain.test:443", 502, VerdictFailed, "cannot resolve nxdomain.test"},
		{"no port", "allowed.test", 400, VerdictRefuse, "CONNECT needs HOST:PORT"},
		{"bad host", "a..b:443", 400, VerdictRefuse, "bad host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := e.u.hits.Load()
			_, _, code, body := connect(t, "tcp", e.addr, tc.target)
			if code != tc.code || !strings.Contains(body, tc.reason) {
				t.Fatalf("CONNECT %s: %d %q, want %d %q", tc.target, code, body, tc.code, tc.reason)
			}
			d := e.rec.last(t)
			if d.Verdict != tc.verdict || d.Reason != strings.TrimSpace(strings.TrimPrefix(body, "shoal egress: ")) || d.Rule != -1 || d.Addr.IsValid() {
				t.Fatalf("decision %+v for answer %q", d, body)
			}
			if e.u.hits.Load() != hits {
				t.Fatal("the upstream was reached")
			}
		})
	}
	t.Run("plain http to a disallowed host", func(t *testing.T) {
		_, err := get(t, e.client(false), fmt.Sprintf("http://other.test:%d/", e.u.httpPort))
		if err == nil || !strings.Contains(err.Error(), "403 Forbidden: shoal egress: no rule admits other.test:"+http_) {
			t.Fatalf("got %v", err)
		}
		if d := e.rec.last(t); d.Verdict != VerdictRefuse || d.Connect {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("https through http://", func(t *testing.T) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("origin-form request: %v %v", resp, err)
		}
	})
	t.Run("a sandbox without a policy", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serve(t, e.proxy, ln, "nobody")
		_, _, code, body := connect(t, "tcp", ln.Addr().String(), "allowed.test:"+tls)
		if code != 403 || !strings.Contains(body, "no egress policy") {
			t.Fatalf("%d %q", code, body)
		}
		if d := e.rec.last(t); d.Sandbox != "nobody" || d.Verdict != VerdictRefuse {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("the node's own address", func(t *testing.T) {
		// 127.0.0.2 is not loopback to the check once it is the node's:
		// the node's own class comes after loopback, so use a rule
		// with no CIDR and a public-looking own address.
		p := &Proxy{Policies: e.pols, Resolver: fakeResolver{"own.test": addrs("203.0.113.9")}, OnDecision: e.rec.record,
			NodeAddrs: func() []netip.Addr { return addrs("203.0.113.9") }}
		e.pols.set("own", Policy{Rules: []Rule{{Host: "own.test"}}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serve(t, p, ln, "own")
		_, _, code, body := connect(t, "tcp", ln.Addr().String(), "own.test:443")
		if code != 403 || !strings.Contains(body, "203.0.113.9 is the node's own (SSRF)") {
			t.Fatalf("%d %q", code, body)
		}
	})
}

func TestProxyAudit(t *testing.T) {
	e := newEnv(t)
	p, _, _ := e.pols.Policy(context.Background(), "sb")
	p.Mode, p.Version = ModeAudit, 2
	e.pols.set("sb", p)
	for _, tc := range []struct{ target, reason string }{
		{fmt.Sprintf("other.test:%d", e.u.echoPort), fmt.Sprintf("no rule admits other.test:%d", e.u.echoPort)},
		{fmt.Sprintf("loop.test:%d", e.u.tlsPort), "address 127.0.0.1 is loopback (SSRF)"},
	} {
		c, br, code, body := connect(t, "tcp", e.addr, tc.target)
		if code != 200 {
			t.Fatalf("audit mode refused %s: %d %q", tc.target, code, body)
		}
		d := e.rec.last(t)
		if d.Verdict != VerdictAudit || !strings.HasPrefix(d.Reason, tc.reason) || d.Rule != -1 || !d.Addr.IsValid() || d.PolicyVersion != 2 {
			t.Fatalf("decision %+v, want audit %q", d, tc.reason)
		}
		if strings.HasPrefix(tc.target, "other") {
			echoOnce(t, c, br, "audited")
		}
		c.Close()
	}
	// What the policy admits is still an admit.
	connect(t, "tcp", e.addr, fmt.Sprintf("allowed.test:%d", e.u.echoPort))
	if d := e.rec.last(t); d.Verdict != VerdictAdmit || d.Rule != 0 {
		t.Fatalf("decision %+v", d)
	}
}

func TestProxyPolicyChange(t *testing.T) {
	e := newEnv(t)
	target := fmt.Sprintf("allowed.test:%d", e.u.echoPort)
	c, br, code, _ := connect(t, "tcp", e.addr, target)
	if code != 200 {
		t.Fatalf("CONNECT %s: %d", target, code)
	}
	echoOnce(t, c, br, "before")

	old, _, _ := e.pols.Policy(context.Background(), "sb")
	e.pols.set("sb", Policy{Version: 2, Rules: old.Rules[1:]})
	_, _, code, body := connect(t, "tcp", e.addr, target)
	if code != 403 {
		t.Fatalf("after the rule's removal CONNECT %s: %d %q", target, code, body)
	}
	if d := e.rec.last(t); d.PolicyVersion != 2 || d.Verdict != VerdictRefuse {
		t.Fatalf("decision %+v", d)
	}
	// The established tunnel is not cut.
	echoOnce(t, c, br, "after")

	e.pols.set("sb", Policy{Version: 3, Rules: old.Rules})
	c2, br2, code, _ := connect(t, "tcp", e.addr, target)
	if code != 200 {
		t.Fatalf("after the rule's return CONNECT %s: %d", target, code)
	}
	echoOnce(t, c2, br2, "again")
	if d := e.rec.last(t); d.PolicyVersion != 3 || d.Verdict != VerdictAdmit {
		t.Fatalf("decision %+v", d)
	}
}

func TestProxyFenced(t *testing.T) {
	e := newEnv(t)
	target := fmt.Sprintf("allowed.test:%d", e.u.echoPort)
	open, br, _, _ := connect(t, "tcp", e.addr, target)
	e.fenced.Store(true)
	_, _, code, body := connect(t, "tcp", e.addr, target)
	if code != 503 || !strings.Contains(body, "fenced") {
		t.Fatalf("fenced: %d %q", code, body)
	}
	if d := e.rec.last(t); d.Verdict != VerdictRefuse || !strings.Contains(d.Reason, "fenced") {
		t.Fatalf("decision %+v", d)
	}
	if _, err := get(t, e.client(false), fmt.Sprintf("http://allowed.test:%d/", e.u.httpPort)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("fenced plain http: %v", err)
	}
	echoOnce(t, open, br, "the freeze, not the proxy, stops open tunnels")
	e.fenced.Store(false)
	if _, _, code, _ := connect(t, "tcp", e.addr, target); code != 200 {
		t.Fatalf("unfenced: %d", code)
	}
}

// TestProxyTunnel: over the unix socket the node listens on, a client's
// bytes sent with the CONNECT (before its answer) arrive, and a
// half-close travels both ways: the client shuts its writing, and still
// reads all the upstream answers before the upstream's close.
func TestProxyTunnel(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(t.TempDir(), "sb.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, e.proxy, ln, "sb")

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	target := fmt.Sprintf("allowed.test:%d", e.u.echoPort)
	payload := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	// The CONNECT and the first bytes in one write, then the rest, then
	// the half-close; the echo server answers everything and closes
	// after our EOF.
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly|", target, target)
	var wg sync.WaitGroup
	wg.Go(func() {
		io.WriteString(c, payload)
		c.(*net.UnixConn).CloseWrite()
	})
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	got, err := io.ReadAll(br)
	wg.Wait()
	if err != nil || string(got) != "early|"+payload {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, len("early|"+payload))
	}
}

// TestProxyServeStops: the end of Serve's context closes the listener and
// cuts the open tunnels, and Serve returns nil once they are done.
func TestProxyServeStops(t *testing.T) {
	e := newEnv(t)
	c, br, code, _ := connect(t, "tcp", e.addr, fmt.Sprintf("allowed.test:%d", e.u.echoPort))
	if code != 200 {
		t.Fatal(code)
	}
	echoOnce(t, c, br, "up")
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.ReadByte(); err == nil {
		t.Fatalf("the tunnel survived Serve: read %q", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the tunnel was not cut: %v", err)
	}
	if c, err := net.Dial("tcp", e.addr); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after Serve")
	}
}
