package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
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
