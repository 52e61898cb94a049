package chaos

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"shoal/chaos/dockerproxy"
)

// Fault is one kind of failure. Inject starts it, Heal ends it; the
// scheduler holds it for Hold in between.
type Fault interface {
	Name() string
	Inject(ctx context.Context) error
	Heal(ctx context.Context) error
	// Hold is how long the fault lasts at least.
	Hold(rng *rand.Rand) time.Duration
}

// nodeKill kills the node process hard mid-operation and restarts it on the
// same data.
type nodeKill struct{ e *env }

func (f nodeKill) Name() string { return "node-kill" }
func (f nodeKill) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(200+rng.IntN(800)) * time.Millisecond
}
func (f nodeKill) Inject(context.Context) error { return f.e.kill() }
func (f nodeKill) Heal(ctx context.Context) error {
	if err := f.e.startNode(); err != nil {
		return err
	}
	return f.e.waitServing(ctx, time.Minute)
}

// nodePause stops the node (SIGSTOP) for longer than its lease TTL: when it
// resumes it may believe it still leads, and fencing must refuse its writes.
type nodePause struct{ e *env }

func (f nodePause) Name() string { return "node-pause" }
func (f nodePause) Hold(rng *rand.Rand) time.Duration {
	return chaosLeaseTTL + time.Duration(500+rng.IntN(1500))*time.Millisecond
}
func (f nodePause) Inject(context.Context) error { return f.e.signal(syscall.SIGSTOP) }
func (f nodePause) Heal(ctx context.Context) error {
	if err := f.e.signal(syscall.SIGCONT); err != nil {
		return err
	}
	return f.e.waitServing(ctx, time.Minute)
}

// dockerFaults makes a share of Docker API calls fail and delays the rest.
type dockerFaults struct {
	e   *env
	rng *rand.Rand
}

func (f dockerFaults) Name() string { return "docker-api-faults" }
func (f dockerFaults) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(1+rng.IntN(3)) * time.Second
}
func (f dockerFaults) Inject(context.Context) error {
	f.e.dockerProxy.SetRule(dockerFaultRule(f.rng.Uint64()))
	return nil
}

// dockerFaultRule fails 30% of Docker API calls and delays another 30% by
// 150 ms, drawn from seed; the event stream is always spared. The rule
// runs on the proxy's goroutines, which draw under its lock.
func dockerFaultRule(seed uint64) func(*http.Request) dockerproxy.Rule {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return func(req *http.Request) dockerproxy.Rule {
		if strings.HasSuffix(req.URL.Path, "/events") {
			return dockerproxy.Rule{}
		}
		switch n := r.IntN(10); {
		case n < 3:
			return dockerproxy.Rule{Fail: http.StatusInternalServerError}
		case n < 6:
			return dockerproxy.Rule{Delay: 150 * time.Millisecond}
		}
		return dockerproxy.Rule{}
	}
}
func (f dockerFaults) Heal(context.Context) error { f.e.dockerProxy.Release(); return nil }

// containerLoss removes a random sandbox container behind shoal's back.
type containerLoss struct {
	e   *env
	rng *rand.Rand
}

func (f containerLoss) Name() string { return "container-removed" }
func (f containerLoss) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(300+rng.IntN(700)) * time.Millisecond
}
func (f containerLoss) Inject(ctx context.Context) error {
	cs, err := f.e.containers(ctx)
	if err != nil || len(cs) == 0 {
		return err
	}
	c := cs[f.rng.IntN(len(cs))]
	if f.rng.IntN(2) == 0 {
		err = f.e.docker.ContainerKill(ctx, c.ID, "KILL")
	} else {
		err = f.e.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
	// shoal may have removed or stopped it first: the race is the point.
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		return nil
	}
	return err
}
func (f containerLoss) Heal(context.Context) error { return nil }

// etcdLatency slows every byte between the node and etcd.
type etcdLatency struct{ e *env }

func (f etcdLatency) Name() string { return "etcd-latency" }
func (f etcdLatency) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(1+rng.IntN(3)) * time.Second
}
func (f etcdLatency) Inject(context.Context) error {
	f.e.etcdProxy.SetLatency(40 * time.Millisecond)
	return nil
}
func (f etcdLatency) Heal(context.Context) error { f.e.etcdProxy.SetLatency(0); return nil }

// etcdOutage cuts the node off etcd briefly (shorter than the lease TTL).
type etcdOutage struct{ e *env }

func (f etcdOutage) Name() string { return "etcd-unavailable" }
func (f etcdOutage) Hold(rng *rand.Rand) time.Duration {
	return time.Duration(500+rng.IntN(1000)) * time.Millisecond
}
func (f etcdOutage) Inject(context.Context) error { f.e.etcdProxy.SetDown(true); return nil }
func (f etcdOutage) Heal(context.Context) error   { f.e.etcdProxy.SetDown(false); return nil }

// scenario is a traffic mix plus the faults injected during it.
type scenario struct {
	order        int
	doc          string
	needsProcess bool
	// needsCluster: only with --cluster (hosts this run starts).
	needsCluster bool
	// faults builds the fault set; nil means none.
	faults func(e *env, rng *rand.Rand) []Fault
	// providerRace concentrates traffic on create/attach vs provider delete.
	providerRace bool
	// runState adds stop and start to the traffic and checks invariant
	// 15 all along (runstate.go).
	runState bool
	// egress adds sandboxes with egress rules, policy writers and
	// connections from inside them, and checks invariants 16 and 17
	// (egress.go).
	egress bool
	// share of the run's duration, relative to the others' (0: 1).
	share float64
}

// weight is the scenario's share of the run's duration.
func (s scenario) weight() float64 {
	if s.share <= 0 {
		return 1
	}
	return s.share
}

// scenarioDurations splits d across the named scenarios by their shares.
func scenarioDurations(names []string, d time.Duration) []time.Duration {
	total := 0.0
	for _, n := range names {
		total += scenarios[n].weight()
	}
	out := make([]time.Duration, len(names))
	for i, n := range names {
		out[i] = time.Duration(float64(d) * scenarios[n].weight() / total)
	}
	return out
}

var scenarios = map[string]scenario{
	"conflicts": {order: 0, doc: "the traffic mix, the deletion writers and the contenders, no faults"},
	"provider-race": {order: 1, providerRace: true,
		doc: "sandbox create and attach racing provider delete on a few providers"},
	"node-kill": {order: 2, needsProcess: true, doc: "a node killed hard (SIGKILL) mid-operation, restarted on the same data",
		faults: func(e *env, _ *rand.Rand) []Fault { return []Fault{nodeKill{e}} }},
	"node-pause": {order: 3, needsProcess: true, doc: "a node paused (SIGSTOP) past its lease TTL, then resumed",
		faults: func(e *env, _ *rand.Rand) []Fault { return []Fault{nodePause{e}} }},
	"docker-faults": {order: 4, needsProcess: true, doc: "Docker API errors (30%) and latency (150 ms, 30%) through a proxy",
		faults: func(e *env, rng *rand.Rand) []Fault { return []Fault{dockerFaults{e, rng}} }},
	"container-loss": {order: 5, doc: "sandbox containers killed or removed behind shoal's back",
		faults: func(e *env, rng *rand.Rand) []Fault { return []Fault{containerLoss{e, rng}} }},
	"etcd-faults": {order: 6, needsProcess: true, doc: "etcd latency and brief unavailability (on a cluster: a slow peer, a host cut off briefly)",
		faults: func(e *env, _ *rand.Rand) []Fault { return []Fault{etcdLatency{e}, etcdOutage{e}} }},
	"leader-kill": {order: 7, needsCluster: true, doc: "the leader's host killed (SIGKILL) mid-teardown, restarted once another node leads"},
	"owner-kill":  {order: 8, needsCluster: true, doc: "the host owning sandboxes being deleted killed, restarted after 0-3 TTLs"},
	"node-stop":   {order: 9, needsCluster: true, doc: "a host stopped (SIGSTOP) for 1-3 TTLs, then resumed"},
	"partition":   {order: 10, needsCluster: true, doc: "a host, the leader alone, or a minority of voters cut off the network for 1-3 TTLs"},
	"member-loss": {order: 11, needsCluster: true, doc: "a voter's host killed and restarted; once per run replaced (member remove, --join, node remove)"},
	"slow-peer":   {order: 12, needsCluster: true, doc: "50-200 ms of latency on one voter's raft traffic"},
	"stop-start": {order: 13, needsProcess: true, runState: true,
		doc:    "sandbox stop and start racing label writers, contenders and deletes; the owner killed (SIGKILL) and restarted",
		faults: func(e *env, _ *rand.Rand) []Fault { return []Fault{nodeKill{e}} }},
	// Half a share: its checks are of few connections a second, and the
	// exec of each is dear on a loaded machine.
	"egress": {order: 14, egress: true, share: 0.5,
		doc: "sandboxes with egress rules changed live, connections from inside them through the proxy, the label writers and deletes; etcd latency (on a cluster: a slow peer)",
		faults: func(e *env, _ *rand.Rand) []Fault {
			if !e.owned {
				return nil // etcd is not behind a proxy of this run's
			}
			return []Fault{etcdLatency{e}}
		}},
}
