package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"shoal/chaos/dockerproxy"
	"shoal/chaos/hosts"
	"shoal/docker"
	"shoal/embedetcd"
	"shoal/lease"
	"shoal/store"
)

// The cluster under test (--cluster N): N voters and --workers M workers,
// each a host of its own (package chaos/hosts: its own container, address
// and Docker engine), each node's engine behind a Docker API fault proxy of
// this run. The checkers read etcd through every voter's client URL and
// the engines directly, never through a proxy.

// Node timings of a chaos cluster: short, so that faults heal fast.
const (
	clusterNodeTTL = 3 * time.Second
	clusterLease   = 3 * time.Second
)

func (e *env) startHosts(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "shoal-chaos-cluster-")
	if err != nil {
		return err
	}
	e.dir = dir
	e.proxies = map[string]*dockerproxy.Proxy{}
	hc := hosts.DefaultConfig(e.cfg.Binary)
	hc.Voters, hc.Workers = e.cfg.Cluster, e.cfg.Workers
	hc.Env = e.cfg.NodeEnv
	hc.Dir = filepath.Join(dir, "hosts")
	hc.KeepDir = e.cfg.KeepData
	hc.LeaseTTL, hc.NodeTTL = clusterLease, clusterNodeTTL
	hc.Resync, hc.OrphanGrace = chaosResync, chaosOrphanGrace
	hc.RequireEngines = os.Getenv("SHOAL_REQUIRE_ENGINES") == "1"
	hc.Args = []string{"--prefix", e.cfg.Prefix, "--log-level", "info"}
	// The egress sidecar's image goes to every engine with the sandbox
	// image, when this machine has it; without it the egress scenario is
	// skipped (its report says why).
	if _, err := e.docker.ImageInspect(ctx, docker.DefaultEgressImage); err == nil {
		hc.SandboxImages = []string{docker.DefaultImage, docker.DefaultEgressImage}
	} else {
		e.noEgress = fmt.Sprintf("the egress sidecar image %s is not on this machine's engine (make image), so the hosts' engines lack it: %v", docker.DefaultEgressImage, err)
		logf(e.cfg, "hosts: %s", e.noEgress)
	}
	hc.DockerSocket = func(_ context.Context, n hosts.NodeInfo) (string, error) {
		// A directory of its own per socket: the node mounts it.
		sdir := filepath.Join(dir, "docker-"+n.ID)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return "", err
		}
		p, err := dockerproxy.Start(filepath.Join(sdir, "docker.sock"), n.EngineSocket)
		if err != nil {
			return "", err
		}
		e.mu.Lock()
		e.proxies[n.ID] = p
		e.mu.Unlock()
		return filepath.Join(sdir, "docker.sock"), nil
	}
	if e.cfg.Log != nil {
		hc.Logf = func(format string, a ...any) { logf(e.cfg, format, a...) }
	}
	logf(e.cfg, "starting a cluster of %d voters and %d workers, each a host with its own engine", hc.Voters, hc.Workers)
	if e.hosts, err = hosts.Start(ctx, hc); err != nil {
		return err
	}
	if !e.hosts.SeparateEngines() {
		logf(e.cfg, "the hosts share the system Docker engine: %s", e.hosts.SharedReason())
	}
	if e.raw, err = embedetcd.Dial(e.hosts.EtcdEndpoints()); err != nil {
		return err
	}
	e.live = NewLiveness()
	e.refreshEngines()
	e.api = e.hosts.Addr(0)
	return nil
}

// refreshEngines maps node ids to their engines (a replaced node's is
// gone, its successor's is new), and points the harness's etcd client at
// the members as they are now.
func (e *env) refreshEngines() {
	m := map[string]*client.Client{}
	for i := range e.hosts.Len() {
		if c := e.hosts.Engine(i); c != nil && !e.hosts.Removed(i) {
			m[e.hosts.ID(i)] = c
		}
	}
	e.mu.Lock()
	e.engines = m
	e.mu.Unlock()
	// The harness's own etcd client follows the members too: once every
	// voter it was dialed with has been replaced (a soak's third cycle of
	// member-loss), its calls would hang on dead endpoints for ever.
	e.raw.SetEndpoints(e.hosts.EtcdEndpoints()...)
	// And its API connections, when they exist (not yet at the start).
	if e.conn != nil {
		if err := e.redial(); err != nil {
			logf(e.cfg, "hosts: redial the nodes after a replacement: %v", err)
		}
	}
}

func (e *env) engineMap() map[string]*client.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.engines
}

func (e *env) closeHosts() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.hosts.Close(ctx); err != nil {
		logf(e.cfg, "closing the hosts: %v", err)
	}
	for _, p := range e.proxies {
		p.Close()
	}
}

// hostContainers lists the shoal containers on every host's engine.
func (e *env) hostContainers(ctx context.Context) ([]container.Summary, error) {
	var out []container.Summary
	var errs []error
	for id, c := range e.engineMap() {
		cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelManaged+"=true"), filters.Arg("label", docker.LabelNode+"="+id))})
		if err != nil {
			errs = append(errs, fmt.Errorf("engine of %s: %w", id, err))
			continue
		}
		out = append(out, cs...)
	}
	return out, errors.Join(errs...)
}

// nodeLogs writes every node's log (replaced nodes' too) to files and
// returns their paths, for the fenced-write check.
func (e *env) nodeLogs(ctx context.Context) ([]string, error) {
	var paths []string
	for i := range e.hosts.Len() {
		b, err := e.hosts.Logs(ctx, i)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(e.dir, "node-"+e.hosts.ID(i)+".log")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// leaderIndex is the index of the node that leads now (-1 if none).
func (e *env) leaderIndex(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, ok, err := lease.Current(ctx, e.raw, e.st.LeaderPrefix(), e.st.LeaderTermKey())
	if err != nil || !ok {
		return -1
	}
	for i := range e.hosts.Len() {
		if e.hosts.ID(i) == t.Node && !e.hosts.Removed(i) {
			return i
		}
	}
	return -1
}

// index of a node id (-1 if unknown or replaced).
func (e *env) index(id string) int {
	for i := range e.hosts.Len() {
		if e.hosts.ID(i) == id && !e.hosts.Removed(i) {
			return i
		}
	}
	return -1
}

// ownersOfDeleting are the nodes holding sandboxes being deleted now.
func (e *env) ownersOfDeleting(ctx context.Context) []int {
	snap, err := e.st.Snapshot(ctx)
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var out []int
	for _, sb := range snap.Sandboxes {
		if sb.Meta.DeletionTimestamp == nil {
			continue
		}
		if i := e.index(store.NodeOf(sb)); i >= 0 && !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

// live indexes are the nodes not replaced.
func (e *env) liveIndexes() []int {
	var out []int
	for i := range e.hosts.Len() {
		if !e.hosts.Removed(i) {
			out = append(out, i)
		}
	}
	return out
}

func (e *env) voterIndexes() []int {
	var out []int
	for _, i := range e.liveIndexes() {
		if e.hosts.Voter(i) {
			out = append(out, i)
		}
	}
	return out
}
