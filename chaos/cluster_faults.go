package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/hosts"
	"shoal/internal/backoff"
	"shoal/lease"
)

// Every cluster fault undoes a failed injection (schedule retries it).
var (
	_ Restorer = (*hostKill)(nil)
	_ Restorer = (*hostStop)(nil)
	_ Restorer = (*partition)(nil)
	_ Restorer = (*memberLoss)(nil)
	_ Restorer = (*slowPeer)(nil)
	_ Restorer = (*hostDockerFaults)(nil)
)

// Faults on a cluster of hosts (--cluster). Each picks its node when it is
// injected (from the run's seeded rng, and from the cluster's state: the
// leader, the owners of sandboxes being deleted), records which node in
// the fault record, and tells the run's Liveness when a node's process
// stops and runs again, for invariant 9.

// clusterFault is the common part: the env, the rng, and what the last
// injection did.
type clusterFault struct {
	e   *env
	rng *rand.Rand

	mu    sync.Mutex
	nodes []int
	at    time.Time
	note  string
}

func (f *clusterFault) set(nodes []int, note string) {
	f.mu.Lock()
	f.nodes, f.at, f.note = nodes, time.Now(), note
	f.mu.Unlock()
}

func (f *clusterFault) last() ([]int, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes, f.at
}

// Target names the node(s) of the last injection (FaultRecord.Nodes).
func (f *clusterFault) Target() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, i := range f.nodes {
		ids = append(ids, f.e.hosts.ID(i))
	}
	s := strings.Join(ids, ",")
	if f.note != "" {
		s += " (" + f.note + ")"
	}
	return s
}

// Restore undoes what a failed injection left on the nodes it picked
// (Restorer): each back running, thawed and connected, and serving.
func (f *clusterFault) Restore(ctx context.Context) error {
	nodes, _ := f.last()
	for _, i := range nodes {
		err := f.e.hosts.Restore(ctx, i)
		if errors.Is(err, hosts.ErrRemoved) {
			continue // replaced for good: nothing of it to restore
		}
		if err != nil {
			return err
		}
		if err := f.e.up(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (f *clusterFault) pickAny() int {
	ix := f.e.liveIndexes()
	return ix[f.rng.IntN(len(ix))]
}

func (f *clusterFault) pickVoter() int {
	ix := f.e.voterIndexes()
	return ix[f.rng.IntN(len(ix))]
}

func ttls(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo)*clusterNodeTTL + time.Duration(rng.Int64N(int64(hi-lo)*int64(clusterNodeTTL)+1))
}

// hostKill kills a node (SIGKILL) and starts it again on its data after
// Hold. pick chooses the node.
type hostKill struct {
	*clusterFault
	name string
	pick func(ctx context.Context) (int, string)
	hold func(rng *rand.Rand) time.Duration
	// failover: measure the new leader's first fenced write after the kill.
	failover bool
	took     time.Duration
}

func (f *hostKill) Name() string                      { return f.name }
func (f *hostKill) Hold(rng *rand.Rand) time.Duration { return f.hold(rng) }
func (f *hostKill) Inject(ctx context.Context) error {
	i, note := f.pick(ctx)
	f.set([]int{i}, note)
	f.e.live.Down(f.e.hosts.ID(i), time.Now())
	return f.e.hosts.Kill(ctx, i)
}
func (f *hostKill) Heal(ctx context.Context) error {
	nodes, at := f.last()
	i := nodes[0]
	if f.failover {
		// Bounded on its own: the restart below must keep its budget
		// (the cluster soak once spent the whole fault's 5 minutes here,
		// on a read stuck on the dead member, and the start then failed
		// at once with the deadline gone).
		fctx, cancel := context.WithTimeout(ctx, clusterLease+15*time.Second)
		f.took = f.e.failoverSince(fctx, f.e.hosts.ID(i), at)
		cancel()
	}
	if err := f.e.hosts.Start(ctx, i); err != nil {
		return err
	}
	return f.e.up(ctx, i)
}

// up waits until a restarted node serves, then counts its process as
// running for invariant 9. A SIGKILLed node's containers run on while it
// is dead, by design, and a new process can pause nothing before it has
// registered (it serves only then).
func (e *env) up(ctx context.Context, i int) error {
	if err := e.hosts.WaitServing(ctx, i); err != nil {
		return err
	}
	e.live.Up(e.hosts.ID(i), time.Now())
	return nil
}

// Failover is how long after the kill the next leader made its first
// fenced write (0: not measured, or the killed node won again).
func (f *hostKill) Failover() time.Duration { return f.took }

// failoverSince waits (up to a lease TTL and a bit) for a leader other
// than old and returns how long after at its term began: the term record
// is the new leader's first fenced write.
func (e *env) failoverSince(ctx context.Context, old string, at time.Time) time.Duration {
	deadline := time.Now().Add(clusterLease + 10*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		// Each read bounded: one stuck on the dead member's connection
		// must not take the heal's whole budget.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		t, ok, err := lease.Current(cctx, e.raw, e.st.LeaderPrefix(), e.st.LeaderTermKey())
		cancel()
		if err == nil && ok && t.Node != old && !t.Since.IsZero() && t.Since.After(at) {
			return t.Since.Sub(at)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return 0
}

// hostStop freezes a node (docker pause: SIGSTOP semantics) for Hold: it
// may believe it still leads and that its lease holds when it resumes.
type hostStop struct {
	*clusterFault
	name string
	hold func(rng *rand.Rand) time.Duration
}

func (f *hostStop) Name() string                      { return f.name }
func (f *hostStop) Hold(rng *rand.Rand) time.Duration { return f.hold(rng) }
func (f *hostStop) Inject(ctx context.Context) error {
	i := f.pickAny()
	f.set([]int{i}, "")
	f.e.live.Down(f.e.hosts.ID(i), time.Now())
	return f.e.hosts.Stop(ctx, i)
}
func (f *hostStop) Heal(ctx context.Context) error {
	nodes, _ := f.last()
	i := nodes[0]
	f.e.live.Up(f.e.hosts.ID(i), time.Now())
	if err := f.e.hosts.Resume(ctx, i); err != nil {
		return err
	}
	return f.e.hosts.WaitServing(ctx, i)
}

// partition disconnects hosts from the network: one node, the leader
// alone, or a minority of the voters. Their processes run on (invariant 9
// holds them to freezing their containers).
type partition struct {
	*clusterFault
	name string
	hold func(rng *rand.Rand) time.Duration
}

func (f *partition) Name() string                      { return f.name }
func (f *partition) Hold(rng *rand.Rand) time.Duration { return f.hold(rng) }
func (f *partition) Inject(ctx context.Context) error {
	var nodes []int
	var note string
	switch f.rng.IntN(3) {
	case 0:
		nodes, note = []int{f.pickAny()}, "one node"
	case 1:
		if l := f.e.leaderIndex(ctx); l >= 0 {
			nodes, note = []int{l}, "the leader"
		} else {
			nodes, note = []int{f.pickAny()}, "one node"
		}
	default:
		vs := f.e.voterIndexes()
		f.rng.Shuffle(len(vs), func(a, b int) { vs[a], vs[b] = vs[b], vs[a] })
		nodes, note = vs[:max(1, (len(vs)-1)/2)], "a minority of voters"
	}
	f.set(nodes, note)
	for _, i := range nodes {
		if err := f.e.hosts.Disconnect(ctx, i); err != nil {
			return err
		}
	}
	return nil
}
func (f *partition) Heal(ctx context.Context) error {
	nodes, _ := f.last()
	for _, i := range nodes {
		if err := f.e.hosts.Reconnect(ctx, i); err != nil {
			return err
		}
	}
	for _, i := range nodes {
		if err := f.e.hosts.WaitServing(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// memberLoss kills a voter's host and starts it again; once per run it
// replaces it instead: the member removed, a new voter joined with --join,
// and the dead node forgotten (`node remove`).
type memberLoss struct {
	*clusterFault
	replaced bool // a replacement was made this run
	replace  bool // the last injection replaces
}

func (f *memberLoss) Name() string { return "member-loss" }
func (f *memberLoss) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(500+rng.IntN(2500)) * time.Millisecond
}
func (f *memberLoss) Inject(ctx context.Context) error {
	i := f.pickVoter()
	f.replace = !f.replaced && f.rng.IntN(2) == 0
	note := "killed, restarted"
	if f.replace {
		note = "replaced"
	}
	f.set([]int{i}, note)
	f.e.live.Down(f.e.hosts.ID(i), time.Now())
	return f.e.hosts.Kill(ctx, i)
}
func (f *memberLoss) Heal(ctx context.Context) error {
	nodes, _ := f.last()
	i := nodes[0]
	if !f.replace {
		if err := f.e.hosts.Start(ctx, i); err != nil {
			return err
		}
		return f.e.up(ctx, i)
	}
	f.replaced = true
	old := f.e.hosts.ID(i)
	j, err := f.e.hosts.ReplaceMember(ctx, i)
	if err != nil {
		return err
	}
	f.e.refreshEngines()
	if err := f.e.up(ctx, j); err != nil {
		return err
	}
	// The dead host is gone for good: forget it once the leader has seen
	// it lost (a NotReady node only), then its sandboxes are deleted
	// under the fence rule.
	rctx, cancel := context.WithTimeout(ctx, clusterNodeTTL+30*time.Second)
	defer cancel()
	var call int64
	if f.e.hist != nil {
		call = f.e.hist.now()
	}
	var removed *shoalv1.RemoveNodeResponse
	err = backoff.Retry(rctx, harnessRetry, func(int) error {
		var err error
		removed, err = f.e.hosts.ClusterClient(j).RemoveNode(rctx, &shoalv1.RemoveNodeRequest{Name: old})
		return err
	})
	if err != nil {
		return fmt.Errorf("node remove %s after its replacement: %w", old, err)
	}
	// Its sandboxes' deletions are requests like a client's delete, made
	// while the call ran: the model must know of them (a get may see them
	// DELETING before any client deleted them).
	if f.e.hist != nil {
		f.e.hist.system(f.Name(), "sandbox-delete", call, removed.GetSandboxes())
	}
	return nil
}

// slowPeer adds latency to one voter's raft traffic.
type slowPeer struct{ *clusterFault }

func (f *slowPeer) Name() string { return "slow-peer" }
func (f *slowPeer) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(1+rng.IntN(3)) * time.Second
}
func (f *slowPeer) Inject(context.Context) error {
	i := f.pickVoter()
	d := time.Duration(50+f.rng.IntN(150)) * time.Millisecond
	f.set([]int{i}, d.String())
	return f.e.hosts.SlowPeer(i, d)
}

// Restore: a SlowPeer that failed set no latency; nothing to undo.
func (f *slowPeer) Restore(context.Context) error { return nil }
func (f *slowPeer) Heal(context.Context) error {
	nodes, _ := f.last()
	return f.e.hosts.Unslow(nodes[0])
}

// hostDockerFaults is docker-faults aimed at one host's engine.
type hostDockerFaults struct{ *clusterFault }

func (f *hostDockerFaults) Name() string { return "docker-api-faults" }
func (f *hostDockerFaults) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(1+rng.IntN(3)) * time.Second
}
func (f *hostDockerFaults) Inject(context.Context) error {
	i := f.pickAny()
	f.set([]int{i}, "")
	f.e.mu.Lock()
	p := f.e.proxies[f.e.hosts.ID(i)]
	f.e.mu.Unlock()
	if p == nil {
		return nil
	}
	p.SetRule(dockerFaultRule(f.rng.Uint64()))
	return nil
}
func (f *hostDockerFaults) Heal(context.Context) error {
	nodes, _ := f.last()
	f.e.mu.Lock()
	p := f.e.proxies[f.e.hosts.ID(nodes[0])]
	f.e.mu.Unlock()
	if p != nil {
		p.Release()
	}
	return nil
}

// clusterFaults builds the fault set of a scenario on a cluster.
func clusterFaults(e *env, rng *rand.Rand, scenario string) []Fault {
	base := func() *clusterFault { return &clusterFault{e: e, rng: rng} }
	short := func(rng *rand.Rand) time.Duration { return time.Duration(200+rng.IntN(800)) * time.Millisecond }
	switch scenario {
	case "node-kill":
		cf := base()
		return []Fault{&hostKill{clusterFault: cf, name: "node-kill", hold: short,
			pick: func(context.Context) (int, string) { return cf.pickAny(), "" }}}
	case "node-pause":
		return []Fault{&hostStop{clusterFault: base(), name: "node-pause", hold: func(rng *rand.Rand) time.Duration {
			return clusterLease + time.Duration(500+rng.IntN(1500))*time.Millisecond
		}}}
	case "docker-faults":
		return []Fault{&hostDockerFaults{base()}}
	case "container-loss":
		return []Fault{containerLoss{e, rng}}
	case "etcd-faults":
		return []Fault{&slowPeer{base()}, &partition{clusterFault: base(), name: "etcd-unavailable",
			hold: func(rng *rand.Rand) time.Duration { return time.Duration(500+rng.IntN(1000)) * time.Millisecond }}}
	case "leader-kill":
		cf := base()
		return []Fault{&hostKill{clusterFault: cf, name: "leader-kill", failover: true,
			// Down past the lease, so that another node takes over.
			hold: func(rng *rand.Rand) time.Duration {
				return clusterLease + time.Duration(1000+rng.IntN(1000))*time.Millisecond
			},
			pick: func(ctx context.Context) (int, string) {
				if l := e.leaderIndex(ctx); l >= 0 {
					return l, "the leader"
				}
				return cf.pickAny(), "no leader known: any node"
			}}}
	case "owner-kill":
		cf := base()
		return []Fault{&hostKill{clusterFault: cf, name: "owner-kill",
			hold: func(rng *rand.Rand) time.Duration { return ttls(rng, 0, 3) },
			pick: func(ctx context.Context) (int, string) {
				if os := e.ownersOfDeleting(ctx); len(os) > 0 {
					return os[cf.rng.IntN(len(os))], "owns sandboxes being deleted"
				}
				return cf.pickAny(), "no deletion pending: any node"
			}}}
	case "stop-start":
		cf := base()
		return []Fault{&hostKill{clusterFault: cf, name: "owner-kill",
			hold: func(rng *rand.Rand) time.Duration { return ttls(rng, 0, 3) },
			pick: func(context.Context) (int, string) { return cf.pickAny(), "owns sandboxes being stopped and started" }}}
	case "node-stop":
		return []Fault{&hostStop{clusterFault: base(), name: "node-stop", hold: func(rng *rand.Rand) time.Duration { return ttls(rng, 1, 3) }}}
	case "partition":
		return []Fault{&partition{clusterFault: base(), name: "partition", hold: func(rng *rand.Rand) time.Duration { return ttls(rng, 1, 3) }}}
	case "member-loss":
		return []Fault{&memberLoss{clusterFault: base()}}
	case "slow-peer", "egress":
		return []Fault{&slowPeer{base()}}
	}
	return nil
}
