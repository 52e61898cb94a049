package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/docker/docker/client"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The cluster invariants (issue 8 §3), beside the seven of check.go. 10
// (no write of a deposed leader) is 7 across hosts, and 11 (acknowledged
// writes survive member loss) is 1 with clients on several nodes; both are
// checked as today. 13 and 14 check placement (keyspace.go).
const (
	invOneRunning   = "8-at-most-one-running"
	invCutOffFenced = "9-cut-off-hosts-fenced"
	invConverged    = "12-converged"
	invCapacity     = "13-within-capacity"
	invPlacedReady  = "14-placed-on-ready-node"
)

// ClusterSamplerConfig is what the cluster samplers watch.
type ClusterSamplerConfig struct {
	// Engines are the nodes' own Docker engines, node id → client (the
	// engines themselves, not a fault proxy: the samplers must see them
	// while shoal cannot).
	Engines map[string]*client.Client
	// Etcd is a client that no fault cuts off; Prefix shoal's key prefix.
	Etcd   *clientv3.Client
	Prefix string
	// Cluster, if set, keeps only containers labelled with this cluster id.
	Cluster string
	// Interval between engine samples (default DefaultSampleInterval).
	Interval time.Duration
}

// ClusterSampler runs, for one scenario, the engine sampler (invariant 8,
// and the containers' states for 9) and the keyspace watch (13, 14, and
// the registry's changes for 9):
//
//	cs := NewClusterSampler(cfg)
//	wg.Go(func() { _ = cs.Run(tctx) })    // beside the traffic, until it stops
//	<-cs.Ready()                          // before the first fault
//	... traffic and faults; the faults record each node's process in a
//	... Liveness (Down before SIGKILL/SIGSTOP/SIGTERM, Up after start/SIGCONT)
//	_ = cs.Sync(ctx)                      // the watch has seen everything
//	stop(); wg.Wait()
//	res := cs.Check(name, live.Windows(), margin)  // violations and figures
//
// Run it through the quiet period too (until CheckConvergence returns) to
// hold the nodes' coming back to the same invariants.
type ClusterSampler struct {
	Engines  *EngineSampler
	Keyspace *KeyspaceWatch
}

// NewClusterSampler makes the samplers; Run starts them.
func NewClusterSampler(cfg ClusterSamplerConfig) (*ClusterSampler, error) {
	if len(cfg.Engines) == 0 || cfg.Etcd == nil {
		return nil, errors.New("cluster sampler: engines and an etcd client are required")
	}
	return &ClusterSampler{
		Engines:  NewEngineSampler(cfg.Engines, cfg.Cluster, cfg.Interval),
		Keyspace: NewKeyspaceWatch(cfg.Etcd, cfg.Prefix),
	}, nil
}

// Ready is closed once the keyspace watch runs (the engine sampler needs
// no start).
func (s *ClusterSampler) Ready() <-chan struct{} { return s.Keyspace.Ready() }

// Sync waits until the keyspace watch has seen every change committed
// before the call (KeyspaceWatch.Sync): call it before stopping Run.
func (s *ClusterSampler) Sync(ctx context.Context) error { return s.Keyspace.Sync(ctx) }

// Run runs both samplers until ctx ends and waits for them.
func (s *ClusterSampler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var kerr error
	wg.Go(func() { kerr = s.Keyspace.Run(ctx) })
	wg.Go(func() { _ = s.Engines.Run(ctx) })
	wg.Wait()
	return kerr
}

// ClusterResult is what the cluster checks found in one scenario.
type ClusterResult struct {
	Violations []Violation    `json:"-"`
	Figures    ClusterFigures `json:"figures"`
}

// ClusterFigures go to the report.
type ClusterFigures struct {
	Engines  EngineFigures   `json:"engines"`
	Keyspace KeyspaceFigures `json:"keyspace"`
	Fencing  FencingFigures  `json:"fencing"`
}

// Check checks invariants 8, 9, 13 and 14 over what the samplers saw.
// alive says when each node's process ran (see Window); margin is the
// nodes' --fence-margin. Call it after Run returned.
func (s *ClusterSampler) Check(scn string, alive map[string][]Window, margin time.Duration) ClusterResult {
	var r ClusterResult
	r.Violations = append(r.Violations, s.Engines.Violations(scn)...)
	fv, ff := CheckCutOffFencing(scn, FencingInput{
		Registry: s.Keyspace.Registry(), Samples: s.Engines.Timeline(), Alive: alive, Margin: margin,
	})
	r.Violations = append(r.Violations, fv...)
	r.Violations = append(r.Violations, s.Keyspace.Violations(scn)...)
	r.Figures = ClusterFigures{Engines: s.Engines.Figures(), Keyspace: s.Keyspace.Figures(), Fencing: ff}
	return r
}
