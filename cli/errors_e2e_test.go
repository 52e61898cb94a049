package cli_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// A multi-name delete prints one line per failure naming its object once:
// the server's `sandbox "x" not found` is not prefixed with `sandbox "x": `
// again.
func TestOnePrefixPerErrorThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	_, _, api := startHollowNode(t, bin)
	for _, kind := range []string{"sandbox", "provider"} {
		r := run(t, bin, api, kind, "delete", "nope1", "nope2").must(t, cli.ExitNotFound, kind+" delete nope1 nope2")
		var errs []string
		for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if strings.HasPrefix(l, "Error: ") {
				errs = append(errs, l)
			}
		}
		if len(errs) != 2 {
			t.Fatalf("%s delete nope1 nope2: want two Error lines:\n%s", kind, r.stderr)
		}
		for i, l := range errs {
			name := fmt.Sprintf("%q", fmt.Sprintf("nope%d", i+1))
			if n := strings.Count(l, name); n != 1 || !strings.Contains(l, kind+" "+name) {
				t.Errorf("%s delete: the line names %s %d times (want once, as %s %s): %s", kind, name, n, kind, name, l)
			}
		}
	}
}

// A node whose etcd port is taken names the flag of that port, and only
// it; --listen names itself.
func TestPortClashNamesItsFlagThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	busy := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, flag := range []string{"--etcd-listen-peer", "--etcd-listen-client", "--listen"} {
		cfg := testenv.NodeConfig(t)
		urls := map[string]string{
			"--listen":             fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
			"--etcd-listen-client": cfg.EtcdListenClient,
			"--etcd-listen-peer":   cfg.EtcdListenPeer,
		}
		urls[flag] = busy
		if flag == "--listen" {
			urls[flag] = strings.TrimPrefix(busy, "http://")
		}
		args := []string{"node", "start", "--runtime", "hollow", "--data-dir", cfg.DataDir, "--log-level", "warn"}
		for f, u := range urls {
			args = append(args, f, u)
		}
		r := run(t, bin, "", args...).must(t, cli.ExitError, "node start with "+flag+" taken")
		if want := flag + " " + urls[flag]; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, fmt.Sprint(port)) {
			t.Errorf("%s taken: stderr does not name %q:\n%s", flag, want, r.stderr)
		}
		for f, u := range urls {
			if f != flag && strings.Contains(r.stderr, u) {
				t.Errorf("%s taken: stderr names %s %s, which is free:\n%s", flag, f, u, r.stderr)
			}
		}
	}
}
