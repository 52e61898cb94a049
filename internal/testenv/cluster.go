package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/tcpproxy"
	"shoal/docker"
	"shoal/embedetcd"
)

// ClusterConfig shapes a test cluster. The zero value is three nodes with
// fast timings.
type ClusterConfig struct {
	// Nodes is the number of shoal nodes (default 3).
	Nodes int
	// Voters is the number of nodes that run an embedded etcd member and
	// form the etcd cluster among themselves; the rest are workers. Only 0
	// exists today: one etcd in the test process, and every node a worker
	// that reaches it through its own proxy.
	Voters int
	// SharedEngine puts every node on the system Docker engine, as when
	// private engines cannot run (see StartEngines).
	SharedEngine bool
	// Node timings; defaults: a 2s lease, a 300ms resync and a 1s orphan
	// grace.
	LeaseTTL    time.Duration
	Resync      time.Duration
	OrphanGrace time.Duration
	// Args are extra `shoal node start` flags for every node.
	Args []string
}

// Cluster is a shoal cluster of child processes of the built binary, each
// with its own data dir, API port, log file, Docker engine and TCP proxy to
// etcd. Nodes are numbered from 0. Its methods may fail the test, so call
// them from the test's goroutine.
type Cluster struct {
	t     testing.TB
	cfg   ClusterConfig
	bin   string
	etcd  *clientv3.Client
	etcdS *embedetcd.Server
	nodes []*clusterNode
}

type clusterNode struct {
	id     string
	addr   string
	dir    string // data dir and log file
	engine *Engine
	proxy  *tcpproxy.Proxy // between the node and etcd
	conn   *grpc.ClientConn
	starts int

	mu   sync.Mutex
	proc *process // nil while not running
}

// StartCluster starts an etcd, one engine per node and the nodes, and
// waits until every node serves. Everything is stopped and removed when
// the test ends: the nodes (SIGTERM, then SIGKILL), their containers on
// every engine, the proxies, etcd and the engines.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Voters != 0 {
		t.Fatalf("testenv: ClusterConfig.Voters=%d: embedded etcd members are not implemented yet; use 0 (one external etcd)", cfg.Voters)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Resync == 0 {
		cfg.Resync = 300 * time.Millisecond
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = time.Second
	}
	c := &Cluster{t: t, cfg: cfg, bin: Binary(t)}
	c.etcd, c.etcdS = Etcd(t)

	// Node ids are unique per cluster, so nothing a node of another test
	// left on a shared engine can be taken for this cluster's.
	var rnd [3]byte
	rand.Read(rnd[:])
	prefix := "c" + hex.EncodeToString(rnd[:])
	ids := make([]string, cfg.Nodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-n%d", prefix, i)
	}
	t0 := time.Now()
	engines := startEngines(t, cfg.SharedEngine, ids)
	t.Logf("testenv: %d engines ready in %s", len(engines), time.Since(t0).Round(time.Millisecond))

	etcdAddr := strings.TrimPrefix(c.etcdS.Endpoint(), "http://")
	for i, id := range ids {
		n := &clusterNode{id: id, engine: engines[i], dir: t.TempDir(),
			addr: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
		var err error
		if n.proxy, err = tcpproxy.Start(etcdAddr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.proxy.Close() })
		// A short reconnect backoff: a restarted node should be reachable
		// as soon as it listens, not after gRPC's default of up to 2 min.
		n.conn, err = grpc.NewClient(n.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: 2 * time.Second,
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.conn.Close() })
		c.nodes = append(c.nodes, n)
	}
	// Registered last, so it runs first: the nodes stop before their
	// proxies, etcd and engines go away.
	t.Cleanup(c.shutdown)
	for i := range c.nodes {
		c.start(i)
	}
	t0 = time.Now()
	for i := range c.nodes {
		c.WaitReady(i)
	}
	t.Logf("testenv: %d nodes serving in %s", len(c.nodes), time.Since(t0).Round(time.Millisecond))
	return c
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// ID is node i's node id (sandbox status.node, the containers' node label).
func (c *Cluster) ID(i int) string { return c.node(i).id }

// Addr is node i's API address; it stays the same across restarts.
func (c *Cluster) Addr(i int) string { return c.node(i).addr }

// Client is a Shoal API client of node i; it reconnects across restarts.
func (c *Cluster) Client(i int) shoalv1.ShoalClient { return shoalv1.NewShoalClient(c.node(i).conn) }

// ClusterClient is a Cluster API client of node i.
func (c *Cluster) ClusterClient(i int) shoalv1.ClusterClient {
	return shoalv1.NewClusterClient(c.node(i).conn)
}

// Engine is node i's Docker engine: tests look there to see where a
// container really is.
func (c *Cluster) Engine(i int) *Engine { return c.node(i).engine }

// SeparateEngines reports whether every node has its own engine. When it
// is false they share the system engine: a container on "another node's
// engine" is then also on this one.
func (c *Cluster) SeparateEngines() bool {
	for _, n := range c.nodes {
		if n.engine.Shared {
			return false
		}
	}
	return true
}

// Etcd is a client of the cluster's etcd that no fault touches.
func (c *Cluster) Etcd() *clientv3.Client { return c.etcd }

// LogPath is node i's log file (every start appends to it).
func (c *Cluster) LogPath(i int) string { return filepath.Join(c.node(i).dir, "node.log") }

// Running reports whether node i's process is alive (stopped counts).
func (c *Cluster) Running(i int) bool {
	p := c.node(i).current()
	return p != nil && !p.exited()
}

// Kill sends SIGKILL to node i and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	p := c.running(i)
	p.kill()
	c.node(i).setProc(nil)
	c.t.Logf("testenv: killed node %d (%s)", i, c.ID(i))
}

// Shutdown stops node i gracefully (SIGTERM) and waits until it is gone;
// it fails the test if the node needs SIGKILL or exits with an error.
func (c *Cluster) Shutdown(i int) {
	c.t.Helper()
	p := c.running(i)
	if !p.terminate(30 * time.Second) {
		c.t.Errorf("node %d (%s) did not stop within 30s of SIGTERM; killed it", i, c.ID(i))
	} else if p.err != nil {
		c.t.Errorf("node %d (%s) exited with %v on SIGTERM; log:\n%s", i, c.ID(i), p.err, tail(c.LogPath(i), 20))
	}
	c.node(i).setProc(nil)
}

// Stop freezes node i (SIGSTOP): its connections stay open but it answers
// nothing, as a hung host does. Resume undoes it.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.running(i).signal(syscall.SIGSTOP)
	c.t.Logf("testenv: stopped node %d (%s)", i, c.ID(i))
}

// Resume continues a node frozen by Stop (SIGCONT).
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	c.running(i).signal(syscall.SIGCONT)
	c.t.Logf("testenv: resumed node %d (%s)", i, c.ID(i))
}

// Restart stops node i if it runs (gracefully), starts it again with the
// same id, flags, data dir, address and engine, and waits until it serves.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.Running(i) {
		c.Shutdown(i)
	}
	c.start(i)
	c.WaitReady(i)
}

// CutOff cuts node i off from etcd: its open etcd connections are closed
// and new ones refused until Heal. The node process keeps running.
func (c *Cluster) CutOff(i int) {
	c.t.Helper()
	c.node(i).proxy.SetDown(true)
	c.t.Logf("testenv: cut node %d (%s) off from etcd", i, c.ID(i))
}

// Heal reconnects node i to etcd.
func (c *Cluster) Heal(i int) {
	c.t.Helper()
	c.node(i).proxy.SetDown(false)
	c.t.Logf("testenv: healed node %d (%s)", i, c.ID(i))
}

// WaitReady waits until node i serves a read (a list, which needs etcd)
// and fails the test if its process exits first or a minute passes.
func (c *Cluster) WaitReady(i int) {
	c.t.Helper()
	n := c.node(i)
	deadline := time.Now().Add(time.Minute)
	var lastErr error
	for {
		p := n.current()
		if p == nil {
			c.t.Fatalf("node %d (%s) is not running", i, n.id)
		}
		if p.exited() {
			c.t.Fatalf("node %d (%s) exited: %v; log:\n%s", i, n.id, p.err, tail(c.LogPath(i), 30))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, lastErr = c.Client(i).ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1})
		cancel()
		if lastErr == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d (%s) did not serve within a minute: %v; log:\n%s", i, n.id, lastErr, tail(c.LogPath(i), 30))
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond): // poll interval
		}
	}
}

func (c *Cluster) node(i int) *clusterNode {
	c.t.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("testenv: no node %d in a cluster of %d", i, len(c.nodes))
	}
	return c.nodes[i]
}

// running is node i's live process, or fails the test.
func (c *Cluster) running(i int) *process {
	c.t.Helper()
	p := c.node(i).current()
	if p == nil || p.exited() {
		c.t.Fatalf("node %d (%s) is not running", i, c.ID(i))
	}
	return p
}

func (n *clusterNode) current() *process  { n.mu.Lock(); defer n.mu.Unlock(); return n.proc }
func (n *clusterNode) setProc(p *process) { n.mu.Lock(); defer n.mu.Unlock(); n.proc = p }

// args are node i's `shoal node start` flags. A voters mode adds the
// embedded member's flags here (listen URLs, the initial cluster).
func (c *Cluster) args(n *clusterNode) []string {
	args := []string{"node", "start",
		"--node-id", n.id,
		"--listen", n.addr,
		"--data-dir", filepath.Join(n.dir, "data"),
		"--etcd-endpoints", "http://" + n.proxy.Addr(),
		"--lease-ttl", c.cfg.LeaseTTL.String(),
		"--resync", c.cfg.Resync.String(),
		"--orphan-grace", c.cfg.OrphanGrace.String(),
		"--image", docker.DefaultImage,
	}
	if n.engine.Host != "" {
		args = append(args, "--docker-host", n.engine.Host)
	}
	return append(args, c.cfg.Args...)
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	n := c.node(i)
	if c.Running(i) {
		c.t.Fatalf("node %d (%s) already runs", i, n.id)
	}
	n.starts++
	logf, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== testenv: start %d of node %s\n", n.starts, n.id)
	cmd := exec.Command(c.bin, c.args(n)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if n.engine.Host != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST="+n.engine.Host)
	}
	// SIGKILL if the test process dies: a node must not outlive its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p, err := startProcess(cmd)
	if err != nil {
		c.t.Fatalf("start node %d: %v", i, err)
	}
	n.setProc(p)
	// The client may be backing off after the last process went away.
	n.conn.ResetConnectBackoff()
}

// shutdown is the cluster's cleanup: SIGTERM every node at once, SIGKILL
// what is left after a grace, then remove the nodes' containers from every
// engine (a shared engine keeps everyone else's).
func (c *Cluster) shutdown() {
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		p := n.current()
		if p == nil {
			continue
		}
		wg.Go(func() {
			if !p.terminate(30 * time.Second) {
				c.t.Logf("cleanup: node %d (%s) did not stop within 30s of SIGTERM; killed it", i, n.id)
			}
			n.setProc(nil)
		})
	}
	wg.Wait()
	if c.t.Failed() {
		for i, n := range c.nodes {
			c.t.Logf("node %d (%s): last lines of %s:\n%s", i, n.id, c.LogPath(i), tail(c.LogPath(i), 40))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, e := range c.engines() {
		for _, n := range c.nodes {
			if err := e.RemoveContainers(ctx, docker.LabelNode+"="+n.id); err != nil {
				c.t.Logf("cleanup: %v", err)
			}
		}
	}
}

// engines are the distinct engines of the cluster (one when shared).
func (c *Cluster) engines() []*Engine {
	var out []*Engine
	shared := false
	for _, n := range c.nodes {
		if n.engine.Shared {
			if shared {
				continue
			}
			shared = true
		}
		out = append(out, n.engine)
	}
	return out
}
