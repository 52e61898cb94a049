package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/store"
)

// sandboxJSON is `sandbox get NAME -o json` parsed.
func sandboxJSON(t *testing.T, r result) *shoalv1.Sandbox {
	t.Helper()
	sb := &shoalv1.Sandbox{}
	if err := protojson.Unmarshal([]byte(r.stdout), sb); err != nil {
		t.Fatalf("sandbox -o json: %v\n%s", err, r.stdout)
	}
	return sb
}

// memberHas reports whether voter i's member itself holds key: a
// serializable read of its own state, past its proxy.
func memberHas(t *testing.T, c *testenv.Cluster, i int, key string) (bool, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.MemberClientURL(i)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key, clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return r.Count == 1, nil
}

// g. One of three voters, each a host of its own (process, etcd member,
// Docker engine), killed: the etcd leader's host, so etcd elects anew.
// Every API call works through the other two. Restarted, it catches up:
// its member holds what was written meanwhile. Killed for good, it is
// replaced: `cluster member remove` drops its member, a new node joins
// with --join and becomes a voter, and `node remove` forgets the dead
// node. (TestEtcdClusterMembership covers the membership calls with
// in-process nodes; this is the host-level version.)
func TestVoterLossThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, Voters: 3, Args: []string{"--node-ttl", "3s"}})
	st := store.New(c.Etcd(), store.Options{})
	var status *shoalv1.ClusterStatus
	testenv.Eventually(t, 30*time.Second, "3 healthy members, an etcd leader and a shoal leader", func() (bool, error) {
		var err error
		if status, err = clusterStatus(t, bin, c.Addr(0)); err != nil {
			return false, err
		}
		return healthyMembers(status) == 3 && etcdLeader(status) != "" && status.LeaderNode != "", fmt.Errorf("status %v", status)
	})
	dead := -1
	for i := range c.Len() {
		if c.ID(i) == etcdLeader(status) {
			dead = i
		}
	}
	if dead < 0 {
		t.Fatalf("the etcd leader %q is no node of the cluster", etcdLeader(status))
	}
	a, b := (dead+1)%3, (dead+2)%3
	epA, epB := c.Addr(a), c.Addr(b)
	t.Logf("killing node %d, the etcd leader's host (shoal's leader: %s); calls go through nodes %d and %d", dead, status.LeaderNode, a, b)
	run(t, bin, epA, "provider", "create", "keys", "--type", "generic", "--credential", "K=V").must(t, 0, "provider create")
	run(t, bin, epA, "sandbox", "create", "before", "--provider", "keys", "--node", c.ID(b), "--wait").must(t, 0, "sandbox create")

	c.Kill(dead)
	killed := time.Now()
	// Writes, reads, exec and the cluster calls through the survivors.
	// Until etcd has elected a new leader (an election timeout, 1s, and a
	// vote) a write may fail UNAVAILABLE ("leader changed"): exit 5, retry
	// later, as documented. Nothing else may fail, and not for longer.
	var unavailable []string
	testenv.Eventually(t, 10*time.Second, "the first write after the kill", func() (bool, error) {
		r := run(t, bin, epB, "provider", "create", "meanwhile", "--type", "generic", "--credential", "K=V")
		switch r.code {
		case 0:
			return true, nil
		case cli.ExitUnavailable:
			unavailable = append(unavailable, strings.TrimSpace(strings.SplitN(r.stderr, "\n", 2)[0]))
			return false, fmt.Errorf("exit %d: %s", r.code, r.stderr)
		}
		t.Fatalf("provider create, a voter down: exit %d\n%s", r.code, r.stderr)
		return false, nil
	})
	t.Logf("first write after the kill done %s after it, after %d UNAVAILABLE attempts %q",
		time.Since(killed).Round(time.Millisecond), len(unavailable), unavailable)
	run(t, bin, epA, "provider", "get", "meanwhile").must(t, 0, "provider get, a voter down")
	if r := run(t, bin, epA, "provider", "list").must(t, 0, "provider list, a voter down"); !strings.Contains(r.stdout, "meanwhile") || !strings.Contains(r.stdout, "keys") {
		t.Fatalf("provider list:\n%s", r.stdout)
	}
	run(t, bin, epB, "sandbox", "create", "during", "--provider", "meanwhile", "--node", c.ID(a), "--wait").must(t, 0, "sandbox create, a voter down")
	if sb := sandboxJSON(t, run(t, bin, epB, "sandbox", "get", "during", "-o", "json").must(t, 0, "sandbox get, a voter down")); sb.Status.Phase != shoalv1.SandboxPhase_READY || sb.Status.Node != c.ID(a) {
		t.Fatalf("during: phase %s on %q, want READY on %s", sb.Status.Phase, sb.Status.Node, c.ID(a))
	}
	if r := run(t, bin, epA, "sandbox", "list").must(t, 0, "sandbox list, a voter down"); !strings.Contains(r.stdout, "before") || !strings.Contains(r.stdout, "during") {
		t.Fatalf("sandbox list:\n%s", r.stdout)
	}
	// Through b to a's container: forwarded.
	if r := run(t, bin, epB, "sandbox", "exec", "during", "--", "sh", "-c", "echo $K; exit 3").must(t, 3, "sandbox exec, a voter down"); r.stdout != "V\n" {
		t.Fatalf("exec printed %q, want the provider's credential", r.stdout)
	}
	run(t, bin, epA, "sandbox", "delete", "before", "--wait").must(t, 0, "sandbox delete --wait, a voter down")
	run(t, bin, epB, "provider", "delete", "keys").must(t, 0, "provider delete, a voter down")
	run(t, bin, epB, "sandbox", "get", "before").must(t, cli.ExitNotFound, "the deleted sandbox")
	testenv.Eventually(t, 30*time.Second, "node list shows the dead node NotReady, cluster status its member down", func() (bool, error) {
		r := run(t, bin, epA, "node", "list")
		if r.code != 0 || !strings.Contains(r.stdout, "NotReady") {
			return false, fmt.Errorf("node list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		st, err := clusterStatus(t, bin, epB)
		if err != nil {
			return false, err
		}
		leader := etcdLeader(st)
		return healthyMembers(st) == 2 && leader != "" && leader != c.ID(dead) && st.LeaderNode != c.ID(dead),
			fmt.Errorf("status %v", st)
	})

	// Restarted on its data dir, it catches up: its own member holds what
	// was written without it, and its API serves it.
	t0 := time.Now()
	c.Restart(dead)
	t.Logf("the killed voter serves %s after its restart", time.Since(t0).Round(time.Millisecond))
	for _, key := range []string{st.ProviderKey(store.DefaultWorkspace, "meanwhile"), st.SandboxKey(store.DefaultWorkspace, "during")} {
		testenv.Eventually(t, 30*time.Second, "the restarted member holds "+key, func() (bool, error) {
			return memberHas(t, c, dead, key)
		})
	}
	if ok, err := memberHas(t, c, dead, st.ProviderKey(store.DefaultWorkspace, "keys")); ok || err != nil {
		t.Fatalf("the restarted member still has the provider deleted without it (%v)", err)
	}
	epDead := c.Addr(dead)
	if sb := sandboxJSON(t, run(t, bin, epDead, "sandbox", "get", "during", "-o", "json").must(t, 0, "sandbox get through the restarted node")); sb.Status.Node != c.ID(a) {
		t.Fatalf("during through the restarted node: on %q", sb.Status.Node)
	}
	run(t, bin, epDead, "sandbox", "exec", "during", "--", "true").must(t, 0, "exec through the restarted node")
	testenv.Eventually(t, 30*time.Second, "3 healthy members after the restart", func() (bool, error) {
		st, err := clusterStatus(t, bin, epDead)
		if err != nil {
			return false, err
		}
		return healthyMembers(st) == 3, fmt.Errorf("status %v", st)
	})

	// Replaced: killed for good, its member removed, a new node joins.
	c.Kill(dead)
	run(t, bin, epA, "cluster", "member", "remove", c.ID(dead)).must(t, 0, "cluster member remove of the dead voter")
	if v := voters(memberList(t, bin, epB)); len(v) != 2 || v[c.ID(dead)] {
		t.Fatalf("after the removal, voters are %v", v)
	}
	t0 = time.Now()
	joined := c.Join(a)
	t.Logf("the replacement joined and serves %s after its start", time.Since(t0).Round(time.Millisecond))
	if v := voters(memberList(t, bin, c.Addr(joined))); len(v) != 3 || !v[c.ID(joined)] || !v[c.ID(a)] || !v[c.ID(b)] {
		t.Fatalf("after the join, voters are %v; want %s, %s, %s", v, c.ID(a), c.ID(b), c.ID(joined))
	}
	testenv.Eventually(t, 30*time.Second, "the new member holds the records", func() (bool, error) {
		return memberHas(t, c, joined, st.SandboxKey(store.DefaultWorkspace, "during"))
	})
	epNew := c.Addr(joined)
	run(t, bin, epNew, "sandbox", "exec", "during", "--", "true").must(t, 0, "exec through the replacement")
	run(t, bin, epNew, "sandbox", "create", "after", "--node", c.ID(joined), "--wait").must(t, 0, "create on the replacement")
	testenv.Eventually(t, 30*time.Second, "3 healthy members with the replacement", func() (bool, error) {
		st, err := clusterStatus(t, bin, epB)
		if err != nil {
			return false, err
		}
		return healthyMembers(st) == 3, fmt.Errorf("status %v", st)
	})
	// The dead host's node record goes too: `node remove` records the
	// request, the leader forgets the node (a fenced Txn) once no sandbox
	// names it.
	testenv.Eventually(t, 30*time.Second, "node remove of the dead node", func() (bool, error) {
		r := run(t, bin, epNew, "node", "remove", c.ID(dead))
		return r.code == 0, fmt.Errorf("exit %d: %s", r.code, r.stderr)
	})
	t0 = time.Now()
	testenv.Eventually(t, 30*time.Second, "node list without the removed node", func() (bool, error) {
		r := run(t, bin, epNew, "node", "list").must(t, 0, "node list")
		return !strings.Contains(r.stdout, c.ID(dead)) && strings.Contains(r.stdout, c.ID(joined)), fmt.Errorf("node list:\n%s", r.stdout)
	})
	t.Logf("the removed node left node list %s after node remove returned", time.Since(t0).Round(time.Millisecond))
}

func healthyMembers(st *shoalv1.ClusterStatus) int {
	n := 0
	for _, m := range st.Members {
		if m.Healthy {
			n++
		}
	}
	return n
}

// etcdLeader is the name of the member that leads raft, or "".
func etcdLeader(st *shoalv1.ClusterStatus) string {
	for _, m := range st.Members {
		if m.Leader {
			return m.Name
		}
	}
	return ""
}
