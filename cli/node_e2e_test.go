package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/node"
)

// The node registry through the built binary: node list and get, cordon
// and uncordon steering placement, --node and --node-selector, and a
// second node with a live node's id refused with one line naming it.
func TestNodeCommandsThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.NodeLabels = map[string]string{"zone": "a"}
	cfg.MaxSandboxes = 3
	n := testenv.StartNode(t, cfg)
	ep, id := n.Addr(), cfg.ID

	r := run(t, bin, ep, "node", "list").must(t, 0, "node list")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "Ready") || !strings.Contains(r.stdout, "0/3") || !strings.Contains(r.stdout, "zone=a") {
		t.Fatalf("node list:\n%s", r.stdout)
	}
	r = run(t, bin, ep, "node", "list", "-o", "json").must(t, 0, "node list -o json")
	var list struct {
		Items []struct {
			Name   string
			Status struct{ Ready bool }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 1 || !list.Items[0].Status.Ready {
		t.Fatalf("node list -o json: %v\n%s", err, r.stdout)
	}
	run(t, bin, ep, "node", "get", id, "-o", "yaml").must(t, 0, "node get")
	run(t, bin, ep, "node", "get", "no-such-node").must(t, cli.ExitNotFound, "node get unknown")

	run(t, bin, ep, "node", "cordon", id).must(t, 0, "cordon")
	r = run(t, bin, ep, "sandbox", "create", "blocked").must(t, cli.ExitPrecondition, "create on a cordoned cluster")
	if !strings.Contains(r.stderr, "no node fits: "+id+" cordoned") {
		t.Fatalf("cordoned create: %s", r.stderr)
	}
	if r := run(t, bin, ep, "node", "list"); !strings.Contains(r.stdout, "Ready,Cordoned") {
		t.Fatalf("node list of a cordoned node:\n%s", r.stdout)
	}
	run(t, bin, ep, "node", "uncordon", id, "-o", "json").must(t, 0, "uncordon, flags after the name")

	r = run(t, bin, ep, "sandbox", "create", "picky", "--node-selector", "zone=b").must(t, cli.ExitPrecondition, "selector nobody matches")
	if !strings.Contains(r.stderr, id+" lacks label zone=b") {
		t.Fatalf("selector refusal: %s", r.stderr)
	}
	run(t, bin, ep, "sandbox", "create", "elsewhere", "--node", "other-node").must(t, cli.ExitPrecondition, "--node of an unknown node")
	r = run(t, bin, ep, "sandbox", "create", "here", "--node-selector", "zone=a", "--node", id, "--wait").must(t, 0, "create on the node")
	if r = run(t, bin, ep, "sandbox", "get", "here"); !strings.Contains(r.stdout, id) {
		t.Fatalf("sandbox get does not show its node:\n%s", r.stdout)
	}
	if r := run(t, bin, ep, "node", "list"); !strings.Contains(r.stdout, "1/3") {
		t.Fatalf("node list after one create:\n%s", r.stdout)
	}
	run(t, bin, ep, "sandbox", "delete", "here", "--wait").must(t, 0, "delete")

	// A second node with the live node's id: one clear line, naming the
	// holder's address; exit 4 (the id is taken), --replace-node or not.
	other := testenv.NodeConfig(t)
	r = runWith(t, bin, ep, runOpts{}, "node", "start", "--node-id", id, "--etcd-endpoints", n.EtcdEndpoint(),
		"--data-dir", other.DataDir, "--listen", "127.0.0.1:0", "--replace-node")
	if r.code != cli.ExitPrecondition || !strings.Contains(r.stderr, "held by a live node at "+ep) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
		t.Fatalf("duplicate node id: exit %d\n%s", r.code, r.stderr)
	}
}

// Garbage under the node registry's keys in etcd: `node list` shows each
// such node CORRUPT, a warning line naming its key; `node remove` takes a
// corrupt registry key away at once and a corrupt info record once the
// leader forgets it (hollow runtime: no engine needed).
func TestCorruptNodeRecordsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	ep := n.Addr()
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, k := range []string{"/shoal/nodes/wreck", "/shoal/nodeinfo/ghost"} {
		if _, err := raw.Put(context.Background(), k, "\x0a\xff\xff\xff\xff garbage"); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, bin, ep, "node", "list").must(t, 0, "node list")
	for _, name := range []string{"wreck", "ghost"} {
		row := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, name+" ") {
				row = l
			}
		}
		if !strings.Contains(row, "CORRUPT") {
			t.Fatalf("node list: no CORRUPT row for %s:\n%s", name, r.stdout)
		}
	}
	for _, want := range []string{"warning: node wreck: registry record \"/shoal/nodes/wreck\"", "warning: node ghost: registry record \"/shoal/nodeinfo/ghost\"", "shoal node remove ghost"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("node list: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, cfg.ID) {
		t.Fatalf("node list: the live node is missing:\n%s", r.stdout)
	}
	run(t, bin, ep, "node", "remove", "wreck").must(t, 0, "node remove wreck")
	run(t, bin, ep, "node", "get", "wreck").must(t, cli.ExitNotFound, "node get wreck after remove")
	run(t, bin, ep, "node", "remove", "ghost").must(t, 0, "node remove ghost")
	testenv.Eventually(t, time.Minute, "the leader forgets ghost", func() (bool, error) {
		r := run(t, bin, ep, "node", "list")
		return r.code == 0 && !strings.Contains(r.stdout, "ghost") && r.stderr == "", fmt.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	})
}
