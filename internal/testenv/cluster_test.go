package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

// The harness itself: three nodes, each on its own engine; a sandbox runs
// on the node that took its create and its container is on that node's
// engine only; a node killed with SIGKILL serves again after a restart and
// its container outlived it; a node cut off from etcd fails its calls and
// serves again once healed; a frozen node answers nothing until resumed.
func TestClusterHarness(t *testing.T) {
	hostNetworkUnchanged(t)
	start := time.Now()
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	t.Logf("cluster of %d up in %s (separate engines: %v)", c.Len(), time.Since(start).Round(time.Millisecond), c.SeparateEngines())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	names := []string{"on-zero", "on-one", "on-two"}
	sbs := make([]*shoalv1.Sandbox, c.Len())
	for i, name := range names {
		// Placed on node i (--node) and created through it.
		sbs[i] = create(t, ctx, c.Client(i), name, c.ID(i))
		if sbs[i].Status.Node != c.ID(i) {
			t.Fatalf("%s was placed on node %d (%s) but runs on %q", name, i, c.ID(i), sbs[i].Status.Node)
		}
		onlyOn(t, ctx, c, i, sbs[i].Status.ContainerId)
	}

	// SIGKILL node 2: calls through it fail at once; its container stays.
	c.Kill(2)
	if _, err := get(ctx, c.Client(2), "on-zero", 2*time.Second); status.Code(err) != codes.Unavailable {
		t.Fatalf("get through a killed node: %v, want UNAVAILABLE", err)
	}
	onlyOn(t, ctx, c, 2, sbs[2].Status.ContainerId)
	t0 := time.Now()
	c.Restart(2)
	t.Logf("node 2 serves %s after its restart", time.Since(t0).Round(time.Millisecond))
	for i, name := range names {
		sb, err := get(ctx, c.Client(2), name, 5*time.Second)
		if err != nil {
			t.Fatalf("get %s through the restarted node: %v", name, err)
		}
		if sb.Status.ContainerId != sbs[i].Status.ContainerId || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			t.Fatalf("%s after the restart: container %.12s phase %s, want %.12s READY", name, sb.Status.ContainerId, sb.Status.Phase, sbs[i].Status.ContainerId)
		}
	}

	// Cut node 1 off from etcd: calls through it fail, the others serve.
	c.CutOff(1)
	_, err := get(ctx, c.Client(1), "on-one", 2*time.Second)
	if !unavailable(err) {
		t.Fatalf("get through a node cut off from etcd: %v, want UNAVAILABLE or DEADLINE_EXCEEDED", err)
	}
	t.Logf("get through the cut-off node: %s", status.Code(err))
	if _, err := get(ctx, c.Client(0), "on-one", 5*time.Second); err != nil {
		t.Fatalf("get through node 0 while node 1 is cut off: %v", err)
	}
	t0 = time.Now()
	c.Heal(1)
	c.WaitReady(1)
	t.Logf("node 1 serves %s after healing", time.Since(t0).Round(time.Millisecond))
	if sb, err := get(ctx, c.Client(1), "on-one", 5*time.Second); err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("get through the healed node: %v (%v)", sb.GetStatus(), err)
	}

	// Freeze node 0: calls through it time out; resumed, it serves.
	c.Stop(0)
	if _, err := get(ctx, c.Client(0), "on-zero", time.Second); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("get through a stopped node: %v, want DEADLINE_EXCEEDED", err)
	}
	c.Resume(0)
	c.WaitReady(0)
	onlyOn(t, ctx, c, 0, sbs[0].Status.ContainerId)
}

// Voters mode: three nodes that are etcd members formed with
// --etcd-initial-cluster and a worker that lists them; every member
// advertises its proxies. A voter cut off is a real partition: its API
// fails, its member loses the raft leader and misses what the others
// commit, the others serve and see it unhealthy; healed, it catches up. A
// worker cut off fails its calls and serves again once healed.
func TestClusterVoters(t *testing.T) {
	start := time.Now()
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 4, Voters: 3})
	t.Logf("3 voters and a worker up in %s (separate engines: %v)", time.Since(start).Round(time.Millisecond), c.SeparateEngines())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const worker = 3

	// The members are the three voters, at their proxies' peer URLs.
	ml, err := c.Etcd().MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range ml.Members {
		names[m.Name] = !m.IsLearner
	}
	if len(ml.Members) != 3 || !names[c.ID(0)] || !names[c.ID(1)] || !names[c.ID(2)] || c.Voter(worker) || !c.Voter(0) {
		t.Fatalf("members %v, want the voting members %s, %s, %s", ml.Members, c.ID(0), c.ID(1), c.ID(2))
	}
	st := clusterStatus(t, ctx, c, worker)
	if healthy(st) != 3 {
		t.Fatalf("cluster status through the worker: %v, want 3 healthy members", st.Members)
	}
	create(t, ctx, c.Client(worker), "on-one", c.ID(1))

	// Cut voter 1 off: its API fails, its member loses the raft leader.
	c.CutOff(1)
	if _, err := get(ctx, c.Client(1), "on-one", 2*time.Second); !unavailable(err) {
		t.Fatalf("get through a voter cut off: %v, want UNAVAILABLE or DEADLINE_EXCEEDED", err)
	}
	own, err := clientv3.New(clientv3.Config{Endpoints: []string{c.MemberClientURL(1)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	t0 := time.Now()
	testenv.Eventually(t, 15*time.Second, "the cut-off member has no raft leader", func() (bool, error) {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		s, err := own.Status(sctx, c.MemberClientURL(1))
		if err != nil {
			return false, err
		}
		return s.Leader == 0, fmt.Errorf("its leader is %x", s.Leader)
	})
	t.Logf("the cut-off member lost its leader %s after the cut", time.Since(t0).Round(time.Millisecond))
	// The others commit without it; it does not see that.
	if _, err := c.Client(0).CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "during-cut"}, Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"K": "V"},
	}}); err != nil {
		t.Fatalf("create a provider through voter 0 while voter 1 is cut off: %v", err)
	}
	key := store.New(c.Etcd(), store.Options{}).ProviderKey(store.DefaultWorkspace, "during-cut")
	if n := serializableCount(t, ctx, own, key); n != 0 {
		t.Fatal("the cut-off member has the provider written without it")
	}
	for _, i := range []int{2, worker} {
		if _, err := get(ctx, c.Client(i), "on-one", 5*time.Second); err != nil {
			t.Fatalf("get through node %d while voter 1 is cut off: %v", i, err)
		}
	}
	testenv.Eventually(t, 15*time.Second, "status through voter 0 shows voter 1 unhealthy", func() (bool, error) {
		st := clusterStatus(t, ctx, c, 0)
		for _, m := range st.Members {
			if m.Name == c.ID(1) && !m.Healthy {
				return healthy(st) == 2, fmt.Errorf("%d healthy", healthy(st))
			}
		}
		return false, fmt.Errorf("members %v", st.Members)
	})

	// Healed, it catches up and serves what was written meanwhile.
	t0 = time.Now()
	c.Heal(1)
	c.WaitReady(1)
	t.Logf("voter 1 serves %s after healing", time.Since(t0).Round(time.Millisecond))
	testenv.Eventually(t, 15*time.Second, "the healed member has the provider", func() (bool, error) {
		return serializableCount(t, ctx, own, key) == 1, nil
	})
	if _, err := c.Client(1).GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "during-cut"}); err != nil {
		t.Fatalf("get the provider written during the cut through the healed voter: %v", err)
	}
	testenv.Eventually(t, 15*time.Second, "3 healthy members again", func() (bool, error) {
		st := clusterStatus(t, ctx, c, 1)
		return healthy(st) == 3, fmt.Errorf("members %v", st.Members)
	})

	// A worker cut off reaches no member.
	c.CutOff(worker)
	if _, err := get(ctx, c.Client(worker), "on-one", 2*time.Second); !unavailable(err) {
		t.Fatalf("get through a worker cut off: %v, want UNAVAILABLE or DEADLINE_EXCEEDED", err)
	}
	c.Heal(worker)
	c.WaitReady(worker)
}

func clusterStatus(t *testing.T, ctx context.Context, c *testenv.Cluster, i int) *shoalv1.ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.ClusterClient(i).Status(ctx, &shoalv1.ClusterStatusRequest{})
	if err != nil {
		t.Fatalf("cluster status through node %d: %v", i, err)
	}
	return st
}

func healthy(st *shoalv1.ClusterStatus) int {
	n := 0
	for _, m := range st.Members {
		if m.Healthy {
			n++
		}
	}
	return n
}

// serializableCount counts key in what the member cli dials holds itself.
func serializableCount(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key, clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("serializable read of %s: %v", key, err)
	}
	return r.Count
}

func create(t *testing.T, ctx context.Context, cl shoalv1.ShoalClient, name, node string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := cl.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name},
		Spec: &shoalv1.SandboxSpec{Node: node},
	}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create %s: phase %s (%s), want READY", name, sb.Status.Phase, sb.Status.Message)
	}
	return sb
}

func get(ctx context.Context, cl shoalv1.ShoalClient, name string, within time.Duration) (*shoalv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return cl.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
}

func unavailable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

// onlyOn checks that container id runs on node i's engine and, when the
// engines are separate, that no other engine has it or any container of
// node i.
func onlyOn(t *testing.T, ctx context.Context, c *testenv.Cluster, i int, id string) {
	t.Helper()
	info, err := c.Engine(i).Client.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("container %.12s on node %d's engine: %v", id, i, err)
	}
	if !info.State.Running || info.Config.Labels[docker.LabelNode] != c.ID(i) {
		t.Fatalf("container %.12s on node %d's engine: running %v, node label %q", id, i, info.State.Running, info.Config.Labels[docker.LabelNode])
	}
	if !c.SeparateEngines() {
		t.Logf("the nodes share one engine: not checking that the other engines lack %.12s", id)
		return
	}
	for j := range c.Len() {
		if j == i {
			continue
		}
		e := c.Engine(j).Client
		if _, err := e.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
			t.Fatalf("container %.12s of node %d is visible on node %d's engine (err %v)", id, i, j, err)
		}
		cs, err := e.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"="+c.ID(i)))})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 0 {
			t.Fatalf("node %d's engine has %d containers of node %d", j, len(cs), i)
		}
	}
}

// Three voters on mutual TLS (hollow sandboxes), the shoal leader's
// process killed (SIGKILL, no resignation) and, in a second round, a
// voter cut off the network: through a survivor, a new shoal leader, the
// etcd member list and the cluster status answer within the lease TTL and
// etcd's election, a sandbox on the lost node is deleted (after its fence
// time) and a new one runs; the killed node restarts and serves again,
// over TLS.
func TestTLSClusterFailover(t *testing.T) {
	start := time.Now()
	c := testenv.StartCluster(t, testenv.ClusterConfig{Voters: 3, TLS: true, SharedEngine: true, Args: []string{"--runtime", "hollow"}})
	t.Logf("3 TLS voters up in %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leaderOf := func(i int) (string, error) {
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		defer scancel()
		st, err := c.ClusterClient(i).Status(sctx, &shoalv1.ClusterStatusRequest{})
		if err != nil {
			return "", err
		}
		return st.LeaderNode, nil
	}
	index := func(id string) int {
		for i := range c.Len() {
			if c.ID(i) == id {
				return i
			}
		}
		return -1
	}
	var lead string
	testenv.Eventually(t, 30*time.Second, "a shoal leader", func() (bool, error) {
		var err error
		lead, err = leaderOf(0)
		return lead != "" && err == nil, err
	})
	for round, how := range []string{"kill", "cut off"} {
		lost := index(lead)
		if lost < 0 {
			t.Fatalf("the leader %q is not a node of the cluster", lead)
		}
		survivor := (lost + 1) % 3
		name := fmt.Sprintf("on-lost-%d", round)
		create(t, ctx, c.Client(survivor), name, lead)
		t0 := time.Now()
		if how == "kill" {
			c.Kill(lost)
		} else {
			c.CutOff(lost)
		}
		testenv.Eventually(t, 30*time.Second, "another shoal leader seen through node "+c.ID(survivor), func() (bool, error) {
			l, err := leaderOf(survivor)
			if err != nil || l == "" || l == lead {
				return false, fmt.Errorf("leader %q: %v", l, err)
			}
			lead = l
			return true, nil
		})
		t.Logf("%s: a new leader %s after %s", how, lead, time.Since(t0).Round(time.Millisecond))
		testenv.Eventually(t, 20*time.Second, "the member list through node "+c.ID(survivor), func() (bool, error) {
			sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
			defer scancel()
			ms, err := c.ClusterClient(survivor).ListMembers(sctx, &shoalv1.ListMembersRequest{})
			return err == nil && len(ms.GetMembers()) == 3, err
		})
		t.Logf("%s: member list answers %s after", how, time.Since(t0).Round(time.Millisecond))
		dctx, dcancel := context.WithTimeout(ctx, time.Minute)
		_, err := c.Client(survivor).DeleteSandbox(dctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true})
		dcancel()
		if err != nil {
			t.Fatalf("%s: delete the lost node's sandbox through a survivor: %v", how, err)
		}
		t.Logf("%s: its sandbox deleted %s after", how, time.Since(t0).Round(time.Millisecond))
		create(t, ctx, c.Client(survivor), fmt.Sprintf("after-%d", round), "")
		if how == "kill" {
			c.Restart(lost)
		} else {
			c.Heal(lost)
		}
		c.WaitReady(lost)
	}
}
