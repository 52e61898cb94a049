package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// The API listener's caps through a TLS node: the test's client,
// past its handshake, is not pending; eight idle connections reach
// --max-pending-conns 8, and /readyz then fails naming the saturated
// listener and the flag while a new client is refused and the established
// one is still served; once they close the node is ready, and serves new
// clients, again.
func TestReadyzWhenAPIListenerSaturated(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	secure(&cfg, files(certs(t, cfg.ID), cfg.ID))
	// A minute's deadline: the idle connections stay for the whole test.
	cfg.MaxPendingConns, cfg.MaxPendingConnsPerSource, cfg.HandshakeTimeout = 8, 8, time.Minute
	maddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.MetricsListen = maddr
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	readyz := func() (int, string, error) {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + maddr + "/readyz")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	newClient := func() error {
		tr, err := cfg.TLS.Transport()
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = shoalv1.NewShoalClient(conn).ListSandboxes(cctx, &shoalv1.ListSandboxesRequest{})
		return err
	}

	if _, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "ready, the test's connection past its handshake", func() (bool, error) {
		code, body, err := readyz()
		fams := scrape(t, maddr)
		pending, open := value(fams, "shoal_api_conns_pending", nil), value(fams, "shoal_api_conns_open", nil)
		return code == 200 && pending == 0 && open >= 1, fmt.Errorf("/readyz %d %s %v; pending %v open %v", code, body, err, pending, open)
	})

	var idle []net.Conn
	for range cfg.MaxPendingConns {
		c, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		idle = append(idle, c)
	}
	testenv.Eventually(t, 30*time.Second, "/readyz 503 naming the saturated listener", func() (bool, error) {
		code, body, err := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "API listener is saturated") &&
			strings.Contains(body, "--max-pending-conns"), fmt.Errorf("%d %s %v", code, body, err)
	})
	if err := newClient(); err == nil {
		t.Fatal("a new client was served while the listener was saturated")
	}
	if _, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{}); err != nil {
		t.Fatalf("the established client while the listener was saturated: %v", err)
	}
	fams := scrape(t, maddr)
	if v := value(fams, "shoal_api_listener_saturated", nil); v != 1 {
		t.Errorf("shoal_api_listener_saturated %v, want 1", v)
	}
	if v := value(fams, "shoal_api_conns_refused_total", map[string]string{"reason": "total"}); v < 1 {
		t.Errorf("shoal_api_conns_refused_total{reason=total} %v, want the new client's", v)
	}

	for _, c := range idle {
		c.Close()
	}
	testenv.Eventually(t, 30*time.Second, "ready again", func() (bool, error) {
		code, body, err := readyz()
		return code == 200, fmt.Errorf("%d %s %v", code, body, err)
	})
	if err := newClient(); err != nil {
		t.Fatalf("a new client after the flood: %v", err)
	}
}
