package chaos_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/lease"
)

// The cluster checkers fail on a cluster whose binary breaks the guarantee
// they check (-tags chaosbreak, SHOAL_CHAOS_BREAK), and pass the same
// steps on a healthy one.

// breakNodeTTL is the nodes' lease TTL in these tests; the fence margin
// defaults to it.
const breakNodeTTL = 2 * time.Second

// TestClusterBreaksAreCaught builds one chaosbreak binary for all the
// breaks below.
func TestClusterBreaksAreCaught(t *testing.T) {
	testenv.RequireDocker(t)
	broken := buildShoal(t, "chaosbreak")
	t.Run("no-freeze", func(t *testing.T) { noFreezeIsCaught(t, broken) })
	t.Run("placement", func(t *testing.T) { brokenPlacementIsCaught(t, broken) })
	t.Run("unfenced-leader", func(t *testing.T) { unfencedLeaderIsCaught(t, broken) })
}

// sampled starts a ClusterSampler over c and returns it with its stop,
// which first waits until the keyspace watch has seen every change so far
// (idempotent; also run at cleanup).
func sampled(t *testing.T, c *testenv.Cluster) (*chaos.ClusterSampler, func()) {
	t.Helper()
	engines := map[string]*client.Client{}
	for i := range c.Len() {
		engines[c.ID(i)] = c.Engine(i).Client
	}
	cs, err := chaos.NewClusterSampler(chaos.ClusterSamplerConfig{Engines: engines, Etcd: c.Etcd(), Prefix: "/shoal"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = cs.Run(ctx) })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if !t.Failed() {
				syncSampler(t, cs)
			}
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	select {
	case <-cs.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the keyspace watch did not start within 30s")
	}
	return cs, stop
}

// syncSampler waits until the keyspace watch has seen every change so far.
func syncSampler(t *testing.T, cs *chaos.ClusterSampler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.Sync(ctx); err != nil {
		t.Errorf("the keyspace watch did not catch up: %v", err)
	}
}

func lastSample(cs *chaos.ClusterSampler, node string) chaos.NodeSample {
	tl := cs.Engines.Timeline()[node]
	if len(tl) == 0 {
		return chaos.NodeSample{}
	}
	return tl[len(tl)-1]
}

// regState is a node's registry key as the watch last saw it, and when.
func regState(cs *chaos.ClusterSampler, node string) (present bool, at time.Time) {
	evs := cs.Keyspace.Registry()[node]
	if len(evs) == 0 {
		return false, time.Time{}
	}
	return evs[len(evs)-1].Present, evs[len(evs)-1].At
}

// A node cut off from etcd while its sandboxes run: a healthy node pauses
// them once its lease is gone, and invariant 9 holds; a node built with
// no-freeze runs them on, and invariant 9 catches it.
func noFreezeIsCaught(t *testing.T, broken string) {
	for _, tc := range []struct {
		name   string
		bin    string
		env    []string
		caught bool
	}{
		{"healthy", testenv.Binary(t), nil, false},
		{"no-freeze", broken, []string{"SHOAL_CHAOS_BREAK=no-freeze"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Binary: tc.bin, Env: tc.env,
				OrphanGrace: time.Hour, Args: []string{"--node-ttl", breakNodeTTL.String()}})
			owner := c.ID(1)
			cs, stop := sampled(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, name := range []string{"f1", "f2"} {
				if _, err := c.Client(0).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true,
					Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: owner}}}); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, 20*time.Second, "the owner's containers sampled running", func() bool { return lastSample(cs, owner).Running == 2 })

			c.CutOff(1)
			testenv.Eventually(t, 30*time.Second, "the owner's lease expiry seen", func() bool { p, _ := regState(cs, owner); return !p })
			_, expired := regState(cs, owner)
			// Sample well past the fence margin before healing.
			testenv.Eventually(t, 30*time.Second, "samples past the fence margin", func() bool {
				return lastSample(cs, owner).Start.After(expired.Add(breakNodeTTL + time.Second))
			})
			c.Heal(1)
			testenv.Eventually(t, 30*time.Second, "the owner registered again", func() bool { p, _ := regState(cs, owner); return p })
			testenv.Eventually(t, 30*time.Second, "the owner's containers running again", func() bool { return lastSample(cs, owner).Running == 2 })
			stop()

			res := cs.Check(tc.name, nil, breakNodeTTL)
			fig := res.Figures
			t.Logf("%d engine rounds, %d fence episode(s), worst fence time %s; %d violation(s)",
				fig.Engines.Rounds, len(fig.Fencing.Episodes), fig.Fencing.Worst.Round(time.Millisecond), len(res.Violations))
			for _, v := range res.Violations {
				t.Logf("[%s] %s", v.Invariant, v.Detail)
			}
			var inv []string
			for _, v := range res.Violations {
				inv = append(inv, v.Invariant)
			}
			if tc.caught {
				if !slices.Contains(inv, "9-cut-off-hosts-fenced") {
					t.Fatalf("SHOAL_CHAOS_BREAK=no-freeze was not caught as invariant 9")
				}
				return
			}
			if len(res.Violations) > 0 {
				t.Fatalf("violations on a healthy cluster: %v", inv)
			}
			if fig.Fencing.Worst <= 0 || fig.Fencing.Worst > breakNodeTTL || fig.Fencing.WorstNode != owner {
				t.Fatalf("fence time %s on %q: want one in (0, %s] on the cut-off node; episodes %+v",
					fig.Fencing.Worst, fig.Fencing.WorstNode, breakNodeTTL, fig.Fencing.Episodes)
			}
		})
	}
}

// Placement without its compares. no-capacity: a burst of concurrent
// creates onto two nodes of one slot each; without the slot compare more
// than one lands on a node, caught as invariant 13. no-registry-compare:
// creates aimed at a node while it stops gracefully (which revokes its
// lease at once); without the registry compare a create whose placement
// read the node Ready commits after the revoke, caught as invariant 14. A
// healthy cluster passes the same steps. Each race is tried a few times.
func brokenPlacementIsCaught(t *testing.T, broken string) {
	for _, tc := range []struct {
		mode, invariant string
		args            []string
		attempts        int
		attempt         func(t *testing.T, c *testenv.Cluster, cs *chaos.ClusterSampler, live *chaos.Liveness, i int)
	}{
		{"no-capacity", "13-within-capacity", []string{"--max-sandboxes", "1"}, 3, capacityBurst},
		{"no-registry-compare", "14-placed-on-ready-node", nil, 6, createsAtStop},
	} {
		for _, healthy := range []bool{true, false} {
			name := tc.mode
			bin, env := broken, []string{"SHOAL_CHAOS_BREAK=" + tc.mode}
			if healthy {
				name, bin, env = "healthy-"+tc.mode, testenv.Binary(t), nil
			}
			t.Run(name, func(t *testing.T) {
				c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Binary: bin, Env: env,
					Args: append([]string{"--node-ttl", breakNodeTTL.String()}, tc.args...)})
				cs, stop := sampled(t, c)
				live := chaos.NewLiveness()
				attempts := tc.attempts
				if healthy {
					// The broken build is caught on its first attempt as a
					// rule (7 creates on the stopped node in one run): two
					// attempts run the same race several times over.
					attempts = min(attempts, 2)
				}
				for i := range attempts {
					tc.attempt(t, c, cs, live, i)
					syncSampler(t, cs)
					var inv []string
					for _, v := range cs.Keyspace.Violations(name) {
						inv = append(inv, v.Invariant)
					}
					f := cs.Keyspace.Figures()
					t.Logf("attempt %d: %d creates seen, most placed per node %v, %d violation(s)", i+1, f.Creates, f.MaxPlaced, len(inv))
					if !healthy && slices.Contains(inv, tc.invariant) {
						for _, v := range cs.Keyspace.Violations(name) {
							t.Logf("[%s] %s", v.Invariant, v.Detail)
						}
						return
					}
					if healthy && len(inv) > 0 {
						t.Fatalf("violations on a healthy cluster: %v", cs.Keyspace.Violations(name))
					}
				}
				stop()
				if !healthy {
					t.Fatalf("SHOAL_CHAOS_BREAK=%s was not caught as %s in %d attempts", tc.mode, tc.invariant, attempts)
				}
				// A graceful stop leaves containers running by design: the
				// stops are in live.
				if v := cs.Check(name, live.Windows(), breakNodeTTL).Violations; len(v) > 0 {
					t.Fatalf("violations on a healthy cluster: %v", v)
				}
			})
		}
	}
}

// createBurst sends n creates at once through node 0 and waits for all;
// it returns how many succeeded.
func createBurst(t *testing.T, c *testenv.Cluster, n int, name func(int) string, node string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for k := range n {
		wg.Go(func() {
			<-start
			_, err := c.Client(k%c.Len()).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{
				Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name(k)}, Spec: &shoalv1.SandboxSpec{Node: node}}})
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return ok
}

// capacityBurst: 8 creates at once onto two nodes of one slot each, after
// the last attempt's sandboxes are deleted.
func capacityBurst(t *testing.T, c *testenv.Cluster, cs *chaos.ClusterSampler, live *chaos.Liveness, i int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if i > 0 {
		page, err := c.Client(0).ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range page.Items {
			if _, err := c.Client(0).DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: sb.Meta.Name, Wait: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := createBurst(t, c, 8, func(k int) string { return fmt.Sprintf("cap%d-%d", i, k) }, "")
	t.Logf("attempt %d: %d of 8 creates succeeded onto 2 nodes of 1 slot each", i+1, n)
}

// createsAtStop: 16 clients create sandboxes on node 1 (started again
// after the first attempt) in a loop while it stops gracefully, until 32
// creates were sent after the watch saw its registry key go.
func createsAtStop(t *testing.T, c *testenv.Cluster, cs *chaos.ClusterSampler, live *chaos.Liveness, i int) {
	const victim = 1
	node := c.ID(victim)
	if i > 0 {
		live.Up(node, time.Now())
		c.Restart(victim)
		testenv.Eventually(t, 30*time.Second, "the node registered again", func() bool { p, _ := regState(cs, node); return p })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, bad  int
		after    int       // creates sent after gone
		gone     time.Time // when the watch saw the key go
		firstErr error
	)
	hctx, stopHammer := context.WithCancel(ctx)
	for k := range 16 {
		wg.Go(func() {
			for seq := 0; hctx.Err() == nil; seq++ {
				mu.Lock()
				if !gone.IsZero() {
					after++
				}
				mu.Unlock()
				_, err := c.Client(0).CreateSandbox(hctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
					Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("r%d-%d-%d", i, k, seq)}, Spec: &shoalv1.SandboxSpec{Node: node}}})
				mu.Lock()
				if err == nil {
					ok++
				} else if hctx.Err() == nil {
					bad++
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	// Let the creates get going, then stop the node under them.
	testenv.Eventually(t, 30*time.Second, "creates landing on the node", func() bool { mu.Lock(); defer mu.Unlock(); return ok >= 16 })
	live.Down(node, time.Now())
	c.Shutdown(victim) // revokes its lease before it exits
	testenv.Eventually(t, 30*time.Second, "the node's registry key gone", func() bool { p, _ := regState(cs, node); return !p })
	_, at := regState(cs, node)
	mu.Lock()
	gone = at
	mu.Unlock()
	testenv.Eventually(t, 30*time.Second, "32 creates sent after the revoke", func() bool { mu.Lock(); defer mu.Unlock(); return after >= 32 })
	stopHammer()
	wg.Wait()
	t.Logf("attempt %d: %d creates on %s succeeded, %d refused (first: %v)", i+1, ok, node, bad, firstErr)
}

// A deposed leader's writes. Both clusters run deaf-leader: a leader that
// lost its lease does not notice, and only a failed fenced write ends its
// term. The leader is stopped (SIGSTOP) until the other node leads, the
// other is stopped in turn, the deaf one resumed, and sandboxes of its own
// deleted: it removes them under its old fence. With the fence compare its
// first removal is refused, it campaigns again and removes them under a
// new term: invariant 7 holds. With unfenced-leader too, its removals land
// under the fence of a term that is over, and invariant 7 (10 across
// hosts) catches every one of them.
func unfencedLeaderIsCaught(t *testing.T, broken string) {
	for _, tc := range []struct {
		modes  string
		caught bool
	}{
		{"deaf-leader", false},
		{"deaf-leader,unfenced-leader", true},
	} {
		t.Run(tc.modes, func(t *testing.T) {
			c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Binary: broken, Env: []string{"SHOAL_CHAOS_BREAK=" + tc.modes},
				Args: []string{"--node-ttl", breakNodeTTL.String(), "--log-format", "json"}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			leader := func() string {
				term, ok, err := lease.Current(ctx, c.Etcd(), "/shoal/leader/", "/shoal/cluster/leader")
				if err != nil || !ok {
					return ""
				}
				return term.Node
			}
			testenv.Eventually(t, 30*time.Second, "a leader", func() bool { return leader() != "" })
			li := 0
			if leader() == c.ID(1) {
				li = 1
			}
			oi := 1 - li
			names := []string{"u0", "u1", "u2"}
			for _, name := range names {
				if _, err := c.Client(li).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true,
					Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: c.ID(li)}}}); err != nil {
					t.Fatal(err)
				}
			}
			start, err := c.Etcd().Get(ctx, "/shoal/cluster/id")
			if err != nil {
				t.Fatal(err)
			}
			from := start.Header.Revision

			c.Stop(li)
			testenv.Eventually(t, 30*time.Second, "the other node leading", func() bool { return leader() == c.ID(oi) })
			c.Stop(oi)
			c.Resume(li)
			// Through the deaf leader's own API, which refuses calls
			// (UNAVAILABLE) until it holds its liveness lease again.
			for _, name := range names {
				testenv.Eventually(t, 30*time.Second, "delete "+name+" accepted", func() bool {
					_, err := c.Client(li).DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name})
					if err != nil && status.Code(err) != codes.Unavailable {
						t.Fatal(err)
					}
					return err == nil
				})
			}
			testenv.Eventually(t, 60*time.Second, "the sandboxes removed", func() bool {
				r, err := c.Etcd().Get(ctx, "/shoal/sandboxes/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err == nil && r.Count == 0
			})
			c.Resume(oi)

			v, n, err := chaos.CheckFencedWrites(ctx, c.Etcd(), tc.modes, []string{c.LogPath(0), c.LogPath(1)}, from)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d fenced writes checked, %d violation(s)", n, len(v))
			for _, x := range v {
				t.Logf("[%s] %s", x.Invariant, x.Detail)
			}
			if n < len(names) {
				t.Fatalf("%d fenced writes logged; want at least the %d removals", n, len(names))
			}
			if !tc.caught {
				// The compare did refuse the deaf leader: its term ended on it.
				b, err := os.ReadFile(c.LogPath(li))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), "fenced out; stopping leader loops") {
					t.Fatal("the deaf leader's log shows no refused fenced write: the race was not run")
				}
			}
			if got := len(v) > 0; got != tc.caught {
				t.Fatalf("SHOAL_CHAOS_BREAK=%s: violations %v, want caught=%v", tc.modes, v, tc.caught)
			}
			for _, x := range v {
				if x.Invariant != "7-no-fenced-out-write" {
					t.Fatalf("invariant %s", x.Invariant)
				}
			}
		})
	}
}

// Convergence on a real cluster of three voters: after creates and deletes
// (with a provider) it converges; with a node cut off (a partition of its
// host, member included) and a container behind shoal's back it does not,
// and says what is missing; healed and cleaned, it converges again. The
// cluster samplers run throughout: the partition is one fence episode of
// the cut node, frozen within the margin, and no invariant breaks.
func TestConvergenceOnCluster(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, Voters: 3, OrphanGrace: time.Hour,
		Args: []string{"--node-ttl", breakNodeTTL.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	engines := map[string]*client.Client{}
	for i := range c.Len() {
		engines[c.ID(i)] = c.Engine(i).Client
	}
	cfg := chaos.ConvergenceConfig{Etcd: c.Etcd(), Prefix: "/shoal", Engines: engines, Bound: 30 * time.Second}
	cs, stop := sampled(t, c)
	api := c.Client(0)
	if _, err := api.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p"}, Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"K": "v"}}}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b", "c"} {
		if _, err := api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: c.ID(i), Providers: []string{"p"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	v, fig := chaos.CheckConvergence(ctx, "healthy", cfg)
	t.Logf("converged %v after %s (%d polls)", fig.Converged, fig.After.Round(time.Millisecond), fig.Polls)
	if len(v) > 0 || !fig.Converged {
		t.Fatalf("a healthy cluster did not converge: %v", v)
	}

	// A container of no sandbox on node 0's engine, and node 2 cut off.
	stray, err := c.Engine(0).Client.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: map[string]string{
		docker.LabelManaged: "true", docker.LabelNode: c.ID(0), docker.LabelUID: "stray"}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	c.CutOff(2)
	cfg.Bound = 4 * breakNodeTTL // past the lease and the loss being recorded
	v, fig = chaos.CheckConvergence(ctx, "cut", cfg)
	var details []string
	for _, x := range v {
		if x.Invariant != "12-converged" {
			t.Fatalf("invariant %s", x.Invariant)
		}
		details = append(details, x.Detail)
	}
	all := strings.Join(details, "\n")
	t.Logf("not converged, as it should not:\n%s", all)
	for _, want := range []string{
		"node " + c.ID(2) + " is not Ready",
		"etcd member " + c.ID(2) + " (",
		"sandbox default/c is UNKNOWN",
		"(uid stray, labelled node " + c.ID(0) + ") on the engine of node " + c.ID(0) + " has no sandbox record",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("unmet conditions lack %q", want)
		}
	}
	if fig.Converged {
		t.Fatal("converged with a node cut off")
	}

	c.Heal(2)
	if err := c.Engine(0).Client.ContainerRemove(ctx, stray.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	cfg.Bound = 30 * time.Second
	v, fig = chaos.CheckConvergence(ctx, "healed", cfg)
	t.Logf("healed: converged %v after %s", fig.Converged, fig.After.Round(time.Millisecond))
	if len(v) > 0 {
		t.Fatalf("did not converge after the heal: %v", v)
	}

	stop()
	res := cs.Check("partition", nil, breakNodeTTL)
	if len(res.Violations) > 0 {
		t.Fatalf("cluster invariants broken by a partition: %v", res.Violations)
	}
	f := res.Figures
	t.Logf("%d engine rounds, %d creates seen, %d watch restarts, fence episodes %+v", f.Engines.Rounds, f.Keyspace.Creates, f.Keyspace.Restarts, f.Fencing.Episodes)
	// The cut node froze its container; every episode (under load another
	// node's 2 s lease may lapse too, and it freezes as it must) within
	// the fence margin.
	cutFroze := false
	for _, ep := range f.Fencing.Episodes {
		cutFroze = cutFroze || ep.Node == c.ID(2) && ep.Frozen && ep.Containers > 0
	}
	if !cutFroze || f.Fencing.Worst > breakNodeTTL || f.Keyspace.Creates != 3 {
		t.Fatalf("the partition's fence episodes: the cut node %s froze its container: %v; worst %s on %q; %d creates seen", c.ID(2), cutFroze, f.Fencing.Worst, f.Fencing.WorstNode, f.Keyspace.Creates)
	}
}
