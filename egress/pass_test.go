package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"shoal/egress/shim"
)

// A shim that passes the sandbox's connections (shim.Pass) and one that
// relays their bytes (shim.Forward, an older sidecar) are both served on
// one socket; a passed tunnel works both ways, and ending the sandbox's
// Serve cuts it (the proxy holds the passed connection; the shim keeps
// nothing of it).
func TestProxyTakesPassedConnections(t *testing.T) {
	u := startUpstreams(t)
	pols := &policyMap{}
	pols.set("sb", Policy{Version: 1, Rules: []Rule{{Host: "127.0.0.1", Ports: []uint16{u.echoPort}}}})
	rec := &recorder{}
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, &Proxy{Policies: pols, OnDecision: rec.record}, ln, "sb")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	shimOn := func(f func(context.Context, net.Listener, string) error) string {
		sln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { f(ctx, sln, sock) })
		return sln.Addr().String()
	}
	passing, relaying := shimOn(shim.Pass), shimOn(shim.Forward)
	target := fmt.Sprintf("127.0.0.1:%d", u.echoPort)
	for name, addr := range map[string]string{"passing": passing, "relaying": relaying} {
		c, br, code, body := connect(t, "tcp", addr, target)
		if code != 200 {
			t.Fatalf("%s shim: CONNECT %s: %d %s", name, target, code, body)
		}
		echoOnce(t, c, br, "hello through the "+name+" shim\n")
	}
	// Refused through the passing shim: the 403 comes on the sandbox's own
	// connection.
	if _, _, code, body := connect(t, "tcp", passing, "127.0.0.1:1"); code != 403 {
		t.Errorf("a CONNECT no rule admits, through the passing shim: %d %s; want 403", code, body)
	}

	// Cut: the sandbox's Serve ends, and the passed tunnel with it.
	c, br, code, _ := connect(t, "tcp", passing, target)
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	echoOnce(t, c, br, "before the cut\n")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.Copy(io.Discard, br); err != nil {
		t.Errorf("the passed tunnel after its Serve ended: %d bytes, %v; want it closed (EOF)", n, err)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// A passing shim hands every connection over on one socket connection
// (the node accepts once, not once per sandbox connection), several open
// at a time; when the node's side goes (a restart) the shim dials again,
// and a shim that passes one connection per socket connection (as before)
// is still served.
func TestPassingShimKeepsOneConnection(t *testing.T) {
	u := startUpstreams(t)
	pols := &policyMap{}
	pols.set("sb", Policy{Version: 1, Rules: []Rule{{Host: "127.0.0.1", Ports: []uint16{u.echoPort}}}})
	sock := filepath.Join(t.TempDir(), "s")
	listen := func() (*countingListener, func() error) {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		cl := &countingListener{Listener: ln}
		return cl, serve(t, &Proxy{Policies: pols}, cl, "sb")
	}
	ln, stop := listen()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { shim.Pass(ctx, sln, sock) })
	passing := sln.Addr().String()
	target := fmt.Sprintf("127.0.0.1:%d", u.echoPort)

	type tunnel struct {
		c  net.Conn
		br *bufio.Reader
	}
	var open []tunnel
	for i := range 5 {
		c, br, code, body := connect(t, "tcp", passing, target)
		if code != 200 {
			t.Fatalf("CONNECT %d: %d %s", i, code, body)
		}
		open = append(open, tunnel{c, br})
	}
	for i, tn := range open { // all five at once, each its own
		echoOnce(t, tn.c, tn.br, fmt.Sprintf("tunnel %d\n", i))
	}
	if n := ln.n.Load(); n != 1 {
		t.Fatalf("the node accepted %d socket connections for 5 sandbox connections; want 1", n)
	}

	// The node's side goes and comes back: the next connection is served.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	os.Remove(sock)
	ln, stop = listen()
	defer stop()
	c, br, code, body := connect(t, "tcp", passing, target)
	if code != 200 {
		t.Fatalf("CONNECT after the node's restart: %d %s", code, body)
	}
	echoOnce(t, c, br, "after the restart\n")
	if n := ln.n.Load(); n != 1 {
		t.Fatalf("the restarted node accepted %d socket connections; want 1", n)
	}

	// A shim of before: one socket connection per passed connection,
	// closed after the descriptor.
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cln.Close()
	wg.Go(func() {
		sc, err := cln.Accept()
		if err != nil {
			return
		}
		defer sc.Close()
		uc, err := net.Dial("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		defer uc.Close()
		if err := shim.SendConn(uc.(*net.UnixConn), sc); err != nil {
			t.Error(err)
		}
	})
	c, br, code, body = connect(t, "tcp", cln.Addr().String(), target)
	if code != 200 {
		t.Fatalf("CONNECT through a one-per-connection shim: %d %s", code, body)
	}
	echoOnce(t, c, br, "through a shim of before\n")

	// A node of before: it takes one descriptor per socket connection and
	// closes the connection (no PassAck). The shim notices and passes
	// every later connection on one of its own: none is lost.
	oldSock := filepath.Join(t.TempDir(), "old")
	oln, err := net.Listen("unix", oldSock)
	if err != nil {
		t.Fatal(err)
	}
	defer oln.Close()
	wg.Go(func() {
		for {
			u, err := oln.Accept()
			if err != nil {
				return
			}
			pc, _, err := shim.ReceiveConn(u.(*net.UnixConn))
			u.Close()
			if err != nil || pc == nil {
				continue
			}
			io.WriteString(pc, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			pc.Close()
		}
	})
	sln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { shim.Pass(ctx, sln2, oldSock) })
	for i := range 5 {
		if _, _, code, body := connect(t, "tcp", sln2.Addr().String(), target); code != 200 {
			t.Fatalf("connection %d through a new shim to a node of before: %d %s", i, code, body)
		}
	}
}
