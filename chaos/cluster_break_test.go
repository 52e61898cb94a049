package chaos_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos"
	"shoal/internal/testenv"
)

// The cluster checkers fail on a cluster whose binary breaks the guarantee
// they check (-tags chaosbreak, SHOAL_CHAOS_BREAK), and pass the same
// steps on a healthy one.

// breakNodeTTL is the nodes' lease TTL in these tests; the fence margin
// defaults to it.
const breakNodeTTL = 2 * time.Second

// waitUntil polls cond every 20ms until it holds, or fails the test.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		<-time.After(20 * time.Millisecond) // poll interval
	}
}

// sampled starts a ClusterSampler over c and returns it with its stop
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
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	select {
	case <-cs.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the keyspace watch did not start within 30s")
	}
	return cs, stop
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
func TestNoFreezeIsCaught(t *testing.T) {
	testenv.RequireDocker(t)
	broken := buildShoal(t, "chaosbreak")
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
			waitUntil(t, 20*time.Second, "the owner's containers sampled running", func() bool { return lastSample(cs, owner).Running == 2 })

			c.CutOff(1)
			waitUntil(t, 30*time.Second, "the owner's lease expiry seen", func() bool { p, _ := regState(cs, owner); return !p })
			_, expired := regState(cs, owner)
			// Sample well past the fence margin before healing.
			waitUntil(t, 30*time.Second, "samples past the fence margin", func() bool {
				return lastSample(cs, owner).Start.After(expired.Add(breakNodeTTL + time.Second))
			})
			c.Heal(1)
			waitUntil(t, 30*time.Second, "the owner registered again", func() bool { p, _ := regState(cs, owner); return p })
			waitUntil(t, 30*time.Second, "the owner's containers running again", func() bool { return lastSample(cs, owner).Running == 2 })
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

