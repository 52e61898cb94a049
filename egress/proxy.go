package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"shoal/egress/shim"
)

// Policies gives a sandbox's current policy; ok is false when the sandbox
// has none (every connection is refused). The proxy asks once per
// connection, so a policy change applies from the next connection on. An
// error (the policy cannot be read now) refuses the connection with a 503.
type Policies interface {
	Policy(ctx context.Context, sandbox string) (p Policy, ok bool, err error)
}

// Resolver resolves a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = net.DefaultResolver

// Verdict is what the proxy did with a connection.
type Verdict int

const (
	// VerdictAdmit: a rule admitted it, and the upstream was dialled.
	VerdictAdmit Verdict = iota
	// VerdictRefuse: refused (403; 503 when the node is fenced; 400 for
	// a request that is not a proxy request).
	VerdictRefuse
	// VerdictAudit: an audit-mode policy admitted what enforce would
	// have refused ("would refuse"; Reason says why).
	VerdictAudit
	// VerdictFailed: admitted, but the host did not resolve or no
	// address of it answered (502).
	VerdictFailed
)

func (v Verdict) String() string {
	switch v {
	case VerdictAdmit:
		return "admit"
	case VerdictRefuse:
		return "refuse"
	case VerdictAudit:
		return "audit"
	case VerdictFailed:
		return "failed"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Decision is one connection's outcome, for metrics, events and the audit
// log. It carries the destination the client asked for and why, never a
// request's headers or body.
type Decision struct {
	Sandbox string
	Host    string // as the client named it (lower case), a name or an IP
	Port    uint16
	Verdict Verdict
	// Rule is the index of the admitting rule in the policy, -1 when none
	// did (refused, audit, or a request refused before matching).
	Rule int
	// Reason says why a connection was refused, would have been (audit),
	// or failed; empty when admitted.
	Reason string
	// Addr is the upstream address dialled, when one was.
	Addr netip.AddrPort
	// PolicyVersion is the Version of the policy that decided.
	PolicyVersion int64
	// Connect is true for a CONNECT tunnel, false for a forwarded
	// http:// request.
	Connect bool
}

// The defaults of a Proxy's zero fields.
const (
	DefaultDialTimeout   = 10 * time.Second
	DefaultHeaderTimeout = 10 * time.Second
	// MaxHeaderBytes bounds a proxy request's line and headers.
	MaxHeaderBytes = 64 << 10
)

// Proxy is the node's egress proxy. One Proxy serves every sandbox of a
// node, each through Serve on a listener of its own: the listener is the
// sandbox's identity. Its fields are read, never written, once a Serve
// has started.
type Proxy struct {
	// Policies gives each sandbox's current policy (required).
	Policies Policies
	// Resolver resolves the names clients ask for; nil is
	// net.DefaultResolver, the node's own DNS.
	Resolver Resolver
	// OnDecision, when set, is called once for every connection with its
	// outcome, on the connection's goroutine before any byte is relayed:
	// it must not block.
	OnDecision func(Decision)
	// Fenced, when set and true, refuses every new connection (503): the
	// node lost its lease and freezes its sandboxes. Tunnels already
	// open are left to the freeze.
	Fenced func() bool
	// NodeAddrs gives the node's own addresses, which the SSRF check
	// refuses unless a rule's CIDR names them (HostAddrs reads the
	// interfaces). Asked once per connection.
	NodeAddrs func() []netip.Addr
	// DialTimeout bounds resolving a host and dialling each of its
	// addresses; 0 is DefaultDialTimeout.
	DialTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers; 0 is
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
}

// HostAddrs returns the addresses of the host's interfaces (of the
// network namespace the caller runs in), for Proxy.NodeAddrs.
func HostAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// Serve proxies the connections ln accepts for sandbox until ctx is done
// or ln fails. It returns only when every connection it accepted is
// finished: when ctx is done it closes ln and every open connection
// (tunnels included) and returns nil; when ln fails it waits for the
// open connections to end and returns the error.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, sandbox string) error {
	if p.Policies == nil {
		return errors.New("egress: Proxy.Policies is nil")
	}
	err := shim.Serve(ctx, ln, func(ctx context.Context, c net.Conn, open *shim.Conns) {
		if u, ok := c.(*net.UnixConn); ok {
			// A shim passes the sandbox's connection itself (shim.Pass),
			// or relays its bytes (shim.Forward): the first message says
			// which.
			u.SetReadDeadline(time.Now().Add(orDefault(p.HeaderTimeout, DefaultHeaderTimeout)))
			pc, data, err := shim.ReceiveConn(u)
			if err != nil {
				return
			}
			u.SetReadDeadline(time.Time{})
			if pc != nil {
				p.servePassed(ctx, open, u, pc, sandbox)
				return
			}
			c = &prefixed{Conn: c, first: data}
		}
		p.handle(ctx, open, c, sandbox)
	})
	if err != nil {
		return fmt.Errorf("egress: accept for sandbox %s: %w", sandbox, err)
	}
	return nil
}

// servePassed serves the connections a passing shim hands over on u, the
// first already received, each on a goroutine of its own, until the shim
// closes u (a shim of before one connection carried them all closes it
// after one) or Serve's end closes it; it returns when they have all
// ended. A message on u that is not a passed connection ends u.
func (p *Proxy) servePassed(ctx context.Context, open *shim.Conns, u *net.UnixConn, pc net.Conn, sandbox string) {
	var conns sync.WaitGroup
	defer conns.Wait()
	// Tell the shim that more may come on u (shim.Pass); a shim of
	// before has closed its end already and never reads it.
	u.SetWriteDeadline(time.Now().Add(time.Second))
	u.Write([]byte{shim.PassAck})
	u.SetWriteDeadline(time.Time{})
	for pc != nil {
		if !open.Add(pc) {
			pc.Close()
			return
		}
		c := pc // pc is the next one's below
		conns.Go(func() {
			defer open.Remove(c)
			defer c.Close()
			p.handle(ctx, open, c, sandbox)
		})
		var err error
		if pc, _, err = shim.ReceiveConn(u); err != nil {
			return
		}
	}
}

// prefixed is a connection whose first bytes were read already.
type prefixed struct {
	net.Conn
	first []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.first) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// CloseWrite half-closes the connection underneath (shim.Relay's clean
// end).
func (p *prefixed) CloseWrite() error {
	shim.CloseWrite(p.Conn)
	return nil
}

// refusal is a response the proxy writes instead of relaying.
type refusal struct {
	code   int
	reason string
}

// handle serves one client connection: one CONNECT tunnel, or one
// forwarded http:// request.
func (p *Proxy) handle(ctx context.Context, open *shim.Conns, c net.Conn, sandbox string) {
	dec := Decision{Sandbox: sandbox, Rule: -1}
	report := func() {
		if p.OnDecision != nil {
			p.OnDecision(dec)
		}
	}
	refuse := func(r refusal) {
		if dec.Verdict != VerdictFailed {
			dec.Verdict = VerdictRefuse
		}
		dec.Reason = r.reason
		report()
		writeRefusal(c, r)
	}

	c.SetReadDeadline(time.Now().Add(orDefault(p.HeaderTimeout, DefaultHeaderTimeout)))
	lr := &io.LimitedReader{R: c, N: MaxHeaderBytes}
	br := bufio.NewReader(lr)
	req, err := http.ReadRequest(br)
	if err != nil {
		if lr.N == 0 {
			refuse(refusal{http.StatusRequestHeaderFieldsTooLarge, "request headers over 64 KiB"})
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
			refuse(refusal{http.StatusBadRequest, "not an HTTP request"})
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	lr.N = math.MaxInt64 // a forwarded request's body is not bounded

	host, port, connect, bad := requestTarget(req)
	dec.Host, dec.Port, dec.Connect = host, port, connect
	if bad != "" {
		refuse(refusal{http.StatusBadRequest, bad})
		return
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	if p.Fenced != nil && p.Fenced() {
		refuse(refusal{http.StatusServiceUnavailable, "the node is fenced (cut off from the cluster): no new connections"})
		return
	}
	pol, ok, err := p.Policies.Policy(ctx, sandbox)
	if err != nil {
		dec.Verdict = VerdictFailed
		refuse(refusal{http.StatusServiceUnavailable, "the sandbox's egress policy cannot be read now; try again"})
		return
	}
	if !ok {
		refuse(refusal{http.StatusForbidden, "no egress policy for this sandbox"})
		return
	}
	dec.PolicyVersion = pol.Version
	audit := pol.Mode == ModeAudit
	rules := pol.MatchAll(host, port)
	if len(rules) == 0 {
		why := fmt.Sprintf("no rule admits %s", target)
		if !audit {
			refuse(refusal{http.StatusForbidden, why})
			return
		}
		dec.Verdict, dec.Reason = VerdictAudit, why
	}

	addrs, err := p.resolve(ctx, host)
	if err != nil {
		dec.Verdict = VerdictFailed
		refuse(refusal{http.StatusBadGateway, fmt.Sprintf("cannot resolve %s", host)})
		return
	}
	var nodeAddrs []netip.Addr
	if p.NodeAddrs != nil {
		nodeAddrs = p.NodeAddrs()
	}
	// Every address a matching rule allows, in the resolver's order, with
	// the first rule that allows it.
	type candidate struct {
		addr netip.Addr
		rule int
	}
	var cands []candidate
	var why string
	for _, a := range addrs {
		for _, r := range rules {
			if ok, reason := pol.Allowed(a, r, nodeAddrs); ok {
				cands = append(cands, candidate{a, r})
				break
			} else if why == "" {
				why = reason
			}
		}
	}
	if len(cands) == 0 {
		if !audit {
			refuse(refusal{http.StatusForbidden, why})
			return
		}
		if dec.Verdict != VerdictAudit {
			dec.Verdict, dec.Reason = VerdictAudit, why
		}
		for _, a := range addrs {
			cands = append(cands, candidate{a, -1})
		}
	}
	if p.Fenced != nil && p.Fenced() {
		refuse(refusal{http.StatusServiceUnavailable, "the node is fenced (cut off from the cluster): no new connections"})
		return
	}

	var up net.Conn
	var dialErr error
	d := net.Dialer{Timeout: orDefault(p.DialTimeout, DefaultDialTimeout)}
	for _, cand := range cands {
		ap := netip.AddrPortFrom(cand.addr, port)
		up, dialErr = d.DialContext(ctx, "tcp", ap.String())
		if dialErr == nil {
			dec.Addr, dec.Rule = ap, cand.rule
			break
		}
	}
	if up == nil {
		dec.Verdict = VerdictFailed
		var oe *net.OpError
		if errors.As(dialErr, &oe) {
			dialErr = oe.Err
		}
		refuse(refusal{http.StatusBadGateway, fmt.Sprintf("cannot reach %s: %v", target, dialErr)})
		return
	}
	defer up.Close()
	if p.Fenced != nil && p.Fenced() {
		// Fenced while dialling (a dial may take DialTimeout): nothing
		// opens past the moment the node froze its sandboxes.
		dec.Verdict = VerdictRefuse
		refuse(refusal{http.StatusServiceUnavailable, "the node is fenced (cut off from the cluster): no new connections"})
		return
	}
	if !open.Add(up) {
		return
	}
	defer open.Remove(up)
	report()

	if connect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		// Bytes the client sent after its CONNECT (a TLS ClientHello
		// that did not wait for the 200) are in br's buffer.
		early, _ := br.Peek(br.Buffered())
		shim.Relay(c, up, early)
		return
	}
	forward(c, up, req)
}

// requestTarget reads where a proxy request goes: a CONNECT's authority,
// or an absolute-form http:// URL (port 80 by default). bad says why the
// request is not one the proxy serves.
func requestTarget(req *http.Request) (host string, port uint16, connect bool, bad string) {
	var portStr string
	switch {
	case req.Method == http.MethodConnect:
		connect = true
		host, portStr = req.URL.Hostname(), req.URL.Port()
		if portStr == "" {
			return host, 0, connect, "CONNECT needs HOST:PORT"
		}
	case req.URL.Scheme == "http" && req.URL.Host != "":
		host, portStr = req.URL.Hostname(), req.URL.Port()
		if portStr == "" {
			portStr = "80"
		}
	case req.URL.Scheme == "https":
		return "", 0, false, "https:// goes through CONNECT"
	case req.URL.Scheme != "":
		return "", 0, false, fmt.Sprintf("scheme %q is not proxied: http:// or CONNECT", req.URL.Scheme)
	default:
		return "", 0, false, "not a proxy request: the proxy takes CONNECT HOST:PORT or an absolute http:// URL"
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || n == 0 {
		return host, 0, connect, fmt.Sprintf("bad port %q", portStr)
	}
	port = uint16(n)
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return host, port, connect, "an address with a zone"
		}
		return a.Unmap().String(), port, connect, ""
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if len(host) > MaxHostBytes || checkDNSName(host) != nil {
		return host, port, connect, fmt.Sprintf("bad host %q", host)
	}
	return host, port, connect, ""
}

func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(p.DialTimeout, DefaultDialTimeout))
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	return addrs, err
}

// hopHeaders are the request headers meant for the proxy, not the origin.
var hopHeaders = []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Keep-Alive", "Te", "Trailer", "Upgrade"}

// forward sends one http:// request to the origin in origin form, with
// Connection: close, and relays the origin's answer as it comes (a 100
// Continue included) until the origin closes. A client's further
// requests on the connection are not read: each request is a connection
// of its own to the policy.
func forward(c, up net.Conn, req *http.Request) {
	for _, f := range req.Header.Values("Connection") {
		for tok := range strings.SplitSeq(f, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				req.Header.Del(tok)
			}
		}
	}
	req.Header.Del("Connection")
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Close = true
	req.RequestURI = ""
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := req.Write(up); err != nil {
			up.Close()
		}
	})
	if _, err := shim.Copy(c, up); err == nil {
		shim.CloseWrite(c)
	}
	// The answer is over: whatever of the request is still unsent is
	// not wanted.
	up.Close()
	c.Close()
	wg.Wait()
}

// writeRefusal answers with code and a one-line reason, then closes
// gently: the client's unread bytes (a request body, a TLS ClientHello
// sent after CONNECT) are drained for a moment, so that the close does
// not reset the connection before the client reads the answer.
func writeRefusal(c net.Conn, r refusal) {
	body := "shoal egress: " + r.reason + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		r.code, http.StatusText(r.code), len(body), body)
	shim.CloseWrite(c)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c, 256<<10)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
