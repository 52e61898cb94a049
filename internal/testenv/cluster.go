package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	"shoal/internal/engine"
	"shoal/internal/launch"
	"shoal/internal/proc"
	"shoal/pki"
)

// ClusterConfig shapes a test cluster. The zero value is three nodes with
// fast timings, on one etcd in the test process.
type ClusterConfig struct {
	// Nodes is the number of shoal nodes (default 3).
	Nodes int
	// Voters is the number of nodes, from node 0, that run an embedded
	// etcd member and form the etcd cluster among themselves
	// (--etcd-initial-cluster); the rest are workers whose
	// --etcd-endpoints list the voters. 0 (the default): one etcd in the
	// test process, and every node a worker that reaches it through a
	// proxy of its own.
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
	// Binary is the shoal executable the nodes run (default: Binary(t)),
	// say one built with -tags chaosbreak; Env is added to every node's
	// environment (SHOAL_CHAOS_BREAK=...).
	Binary string
	Env    []string
	// TLS runs the cluster on mutual TLS (it needs Voters > 0): a CA and
	// certificates from pki.Init, https etcd URLs, the nodes' --tls-*
	// flags; Client and ClusterClient dial with the admin's certificate,
	// Etcd with node 0's.
	TLS bool
	// Metrics gives every node a --metrics-listen address (MetricsAddr):
	// /metrics, /healthz and /readyz.
	Metrics bool
}

// Cluster is a shoal cluster of child processes of the built binary, each
// with its own data dir, API port, log file, Docker engine and TCP proxies
// to etcd. Nodes are numbered from 0. Its methods may fail the test, so
// call them from the test's goroutine.
type Cluster struct {
	t      testing.TB
	cfg    ClusterConfig
	bin    string
	prefix string // of the node ids
	etcd   *clientv3.Client
	etcdS  *embedetcd.Server // Voters == 0 only
	// initialCluster is the voters' --etcd-initial-cluster.
	initialCluster string
	shutdownOnce   sync.Once

	// pki is the certificates' directory (TLS).
	pki string

	// mu guards the growth of nodes (Join) and cut against the proxies'
	// source lookups, which run on the proxies' goroutines.
	mu    sync.Mutex
	nodes []*clusterNode
	cut   map[string]bool // ids of the nodes cut off, with Voters > 0
}

type clusterNode struct {
	id      string
	addr    string
	metrics string // --metrics-listen, with ClusterConfig.Metrics
	dir     string // data dir and log file
	engine  *Engine
	conn    *grpc.ClientConn
	starts  int

	// proxy is the node's own way to the test's etcd (Voters == 0).
	proxy *tcpproxy.Proxy
	// A voter's member listens on listenClient and listenPeer and
	// advertises its proxies, so that every connection into it passes
	// one. join is the API address it joined through (Join); empty for
	// the voters of --etcd-initial-cluster.
	voter                    bool
	listenClient, listenPeer string
	clientProxy, peerProxy   *tcpproxy.Proxy
	join                     string

	mu   sync.Mutex
	proc *proc.Process // nil while not running
}

// StartCluster starts the etcd (or the voters' members), one engine per
// node and the nodes, and waits until every node serves. Everything is
// stopped and removed when the test ends: the nodes (SIGTERM, then
// SIGKILL), their containers on every engine, the proxies, etcd and the
// engines.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Voters < 0 || cfg.Voters > cfg.Nodes {
		t.Fatalf("testenv: ClusterConfig.Voters=%d: want 0 (one external etcd) up to Nodes=%d", cfg.Voters, cfg.Nodes)
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
	if cfg.Binary == "" {
		cfg.Binary = Binary(t)
	}
	if cfg.TLS && cfg.Voters == 0 {
		t.Fatal("testenv: ClusterConfig.TLS needs Voters > 0 (the test's own etcd is plaintext)")
	}
	c := &Cluster{t: t, cfg: cfg, bin: cfg.Binary, cut: map[string]bool{}}
	if cfg.TLS {
		c.pki = t.TempDir()
	}
	if cfg.Voters == 0 {
		c.etcd, c.etcdS = Etcd(t)
	}

	// Node ids are unique per cluster, so nothing a node of another test
	// left on a shared engine can be taken for this cluster's.
	var rnd [3]byte
	rand.Read(rnd[:])
	c.prefix = "c" + hex.EncodeToString(rnd[:])
	ids := make([]string, cfg.Nodes)
	for i := range ids {
		ids[i] = c.nodeID(i)
	}
	t0 := time.Now()
	engines := startEngines(t, cfg.SharedEngine, ids)
	t.Logf("testenv: %d engines ready in %s", len(engines), time.Since(t0).Round(time.Millisecond))

	var peers []string
	for i, id := range ids {
		n := c.newNode(id, engines[i])
		switch {
		case cfg.Voters == 0:
			var err error
			if n.proxy, err = tcpproxy.Start(strings.TrimPrefix(c.etcdS.Endpoint(), "http://")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.proxy.Close() })
		case i < cfg.Voters:
			c.newVoter(n)
			peers = append(peers, n.id+"="+c.scheme()+"://"+n.peerProxy.Addr())
		}
		c.mu.Lock() // the voters' proxies run already
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
	}
	c.initialCluster = strings.Join(peers, ",")
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
	if cfg.Voters > 0 {
		var opts []embedetcd.DialOption
		if cfg.TLS {
			tr, err := c.files(c.nodes[0].id).Transport()
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, embedetcd.WithTLS(tr.ClientTLS()))
		}
		cli, err := embedetcd.DialMembers(c.voterClientURLs(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		c.etcd = cli
	}
	return c
}

func (c *Cluster) nodeID(i int) string { return fmt.Sprintf("%s-n%d", c.prefix, i) }

// newNode is node id's address, data dir and API client. A short
// reconnect backoff: a restarted node should be reachable as soon as it
// listens, not after gRPC's default of up to 2 min.
func (c *Cluster) newNode(id string, e *Engine) *clusterNode {
	c.t.Helper()
	n := &clusterNode{id: id, engine: e, dir: c.t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", FreePort(c.t))}
	if c.cfg.Metrics {
		n.metrics = fmt.Sprintf("127.0.0.1:%d", FreePort(c.t))
	}
	creds := insecure.NewCredentials()
	if c.cfg.TLS {
		// One more node's certificate; the CA and the client
		// certificates come with the first.
		if _, err := pki.Init(pki.InitOptions{Dir: c.pki, Nodes: []string{id}}); err != nil {
			c.t.Fatal(err)
		}
		tr, err := c.files("admin").Transport()
		if err != nil {
			c.t.Fatal(err)
		}
		creds = tr.DialCreds()
	}
	var err error
	n.conn, err = grpc.NewClient(n.addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { n.conn.Close() })
	return n
}

// newVoter gives n an etcd member: listen URLs on free ports and a proxy
// in front of each, which the member advertises. The proxies name every
// connection by the node process that dialed it (source), so CutOff can
// refuse a node's connections to every member.
func (c *Cluster) newVoter(n *clusterNode) {
	c.t.Helper()
	n.voter = true
	cp, pp := FreePort(c.t), FreePort(c.t)
	n.listenClient = fmt.Sprintf("%s://127.0.0.1:%d", c.scheme(), cp)
	n.listenPeer = fmt.Sprintf("%s://127.0.0.1:%d", c.scheme(), pp)
	var err error
	if n.clientProxy, err = tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", cp), tcpproxy.WithSource(c.source)); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { n.clientProxy.Close() })
	if n.peerProxy, err = tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", pp), tcpproxy.WithSource(c.source)); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { n.peerProxy.Close() })
}

// source names the node whose process dialed a connection a voter's
// proxy accepted, or "" for anyone else (the test itself, say).
func (c *Cluster) source(conn net.Conn) string {
	c.mu.Lock()
	byPID := map[int]string{}
	var pids []int
	for _, n := range c.nodes {
		if p := n.current(); p != nil && !p.Exited() {
			byPID[p.Pid()] = n.id
			pids = append(pids, p.Pid())
		}
	}
	c.mu.Unlock()
	return byPID[socketOwner(conn, pids)]
}

// voterProxies are every voter's proxies.
func (c *Cluster) voterProxies() []*tcpproxy.Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*tcpproxy.Proxy
	for _, n := range c.nodes {
		if n.voter {
			ps = append(ps, n.clientProxy, n.peerProxy)
		}
	}
	return ps
}

// voterClientURLs are the voters' advertised client URLs (their proxies).
func (c *Cluster) voterClientURLs() []string {
	var us []string
	for _, n := range c.nodes {
		if n.voter {
			us = append(us, c.scheme()+"://"+n.clientProxy.Addr())
		}
	}
	return us
}

// Join starts a new node whose embedded etcd member joins the cluster
// through node via's API (`--join`), on an engine of its own, waits until
// it serves, and returns its index. It needs Voters > 0.
func (c *Cluster) Join(via int) int {
	c.t.Helper()
	if c.cfg.Voters == 0 {
		c.t.Fatal("testenv: Join needs ClusterConfig.Voters > 0")
	}
	through := c.Addr(via)
	i := len(c.nodes)
	id := c.nodeID(i)
	e := startEngines(c.t, c.cfg.SharedEngine, []string{id})[0]
	n := c.newNode(id, e)
	c.newVoter(n)
	// The engine's and the proxies' cleanups run before StartCluster's:
	// shut the cluster down (once) before them, so no node outlives its
	// engine or its proxies.
	c.t.Cleanup(c.shutdown)
	n.join = through
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	for cut := range c.cut {
		n.clientProxy.SetBlocked(cut, true)
		n.peerProxy.SetBlocked(cut, true)
	}
	c.mu.Unlock()
	t0 := time.Now()
	c.start(i)
	c.WaitReady(i)
	c.t.Logf("testenv: node %d (%s) joined through node %d in %s", i, id, via, time.Since(t0).Round(time.Millisecond))
	return i
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

// MetricsAddr is node i's --metrics-listen address (ClusterConfig.Metrics),
// or "".
func (c *Cluster) MetricsAddr(i int) string { return c.node(i).metrics }

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

// Etcd is a client of the cluster's etcd that no fault touches. With
// Voters > 0 it dials every voter through its proxy: a voter cut off
// refuses it, and it goes to the others.
func (c *Cluster) Etcd() *clientv3.Client { return c.etcd }

// Voter reports whether node i runs an etcd member (ClusterConfig.Voters,
// Join).
func (c *Cluster) Voter(i int) bool { return c.node(i).voter }

// MemberClientURL is voter i's member's own client URL, past its proxy:
// it reaches the member even while node i is cut off, so a test can read
// what the member itself holds (clientv3.WithSerializable()).
func (c *Cluster) MemberClientURL(i int) string {
	c.t.Helper()
	n := c.node(i)
	if !n.voter {
		c.t.Fatalf("node %d (%s) is not a voter", i, n.id)
	}
	return n.listenClient
}

// LogPath is node i's log file (every start appends to it).
func (c *Cluster) LogPath(i int) string { return filepath.Join(c.node(i).dir, "node.log") }

// Running reports whether node i's process is alive (stopped counts).
func (c *Cluster) Running(i int) bool {
	p := c.node(i).current()
	return p != nil && !p.Exited()
}

// Kill sends SIGKILL to node i and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	p := c.running(i)
	p.Kill()
	c.node(i).setProc(nil)
	c.t.Logf("testenv: killed node %d (%s)", i, c.ID(i))
}

// Shutdown stops node i gracefully (SIGTERM) and waits until it is gone;
// it fails the test if the node needs SIGKILL or exits with an error.
func (c *Cluster) Shutdown(i int) {
	c.t.Helper()
	p := c.running(i)
	if !p.Terminate(30 * time.Second) {
		c.t.Errorf("node %d (%s) did not stop within 30s of SIGTERM; killed it", i, c.ID(i))
	} else if p.Err() != nil {
		c.t.Errorf("node %d (%s) exited with %v on SIGTERM; log:\n%s", i, c.ID(i), p.Err(), engine.Tail(c.LogPath(i), 20))
	}
	c.node(i).setProc(nil)
}

// Stop freezes node i (SIGSTOP): its connections stay open but it answers
// nothing, as a hung host does. Resume undoes it.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	p := c.running(i)
	p.Signal(syscall.SIGSTOP)
	// The signal is delivered asynchronously: until every thread has
	// stopped, the node may still answer a call.
	Eventually(c.t, 10*time.Second, fmt.Sprintf("node %d's threads all stopped", i), func() (bool, error) { return p.Stopped(), nil })
	c.t.Logf("testenv: stopped node %d (%s)", i, c.ID(i))
}

// Resume continues a node frozen by Stop (SIGCONT).
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	c.running(i).Signal(syscall.SIGCONT)
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

// Start starts node i, which must not run, with the same id, flags, data
// dir, address and engine, and returns at once: for a node that cannot
// serve yet (cut off from etcd). WaitReady waits until it serves.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.start(i)
}

// CutOff cuts node i off from etcd: its open etcd connections are closed
// and new ones refused until Heal. The node process keeps running. With
// Voters > 0 it is a partition of the host: node i's process can reach no
// member's proxy (its own member's peer traffic included), and a voter's
// own proxies refuse everyone, so its member hears from no peer and no
// client reaches it.
func (c *Cluster) CutOff(i int) {
	c.t.Helper()
	c.setCut(i, true)
	c.t.Logf("testenv: cut node %d (%s) off from etcd", i, c.ID(i))
}

// Heal reconnects node i to etcd.
func (c *Cluster) Heal(i int) {
	c.t.Helper()
	c.setCut(i, false)
	c.t.Logf("testenv: healed node %d (%s)", i, c.ID(i))
}

func (c *Cluster) setCut(i int, cut bool) {
	c.t.Helper()
	n := c.node(i)
	if c.cfg.Voters == 0 {
		n.proxy.SetDown(cut)
		return
	}
	c.mu.Lock()
	if cut {
		c.cut[n.id] = true
	} else {
		delete(c.cut, n.id)
	}
	c.mu.Unlock()
	for _, p := range c.voterProxies() {
		p.SetBlocked(n.id, cut)
	}
	if n.voter {
		n.clientProxy.SetDown(cut)
		n.peerProxy.SetDown(cut)
	}
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
		if p.Exited() {
			c.t.Fatalf("node %d (%s) exited: %v; log:\n%s", i, n.id, p.Err(), engine.Tail(c.LogPath(i), 30))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, lastErr = c.Client(i).ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1})
		cancel()
		if lastErr == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d (%s) did not serve within a minute: %v; log:\n%s", i, n.id, lastErr, engine.Tail(c.LogPath(i), 30))
		}
		select {
		case <-p.Done():
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
func (c *Cluster) running(i int) *proc.Process {
	c.t.Helper()
	p := c.node(i).current()
	if p == nil || p.Exited() {
		c.t.Fatalf("node %d (%s) is not running", i, c.ID(i))
	}
	return p
}

func (n *clusterNode) current() *proc.Process  { n.mu.Lock(); defer n.mu.Unlock(); return n.proc }
func (n *clusterNode) setProc(p *proc.Process) { n.mu.Lock(); defer n.mu.Unlock(); n.proc = p }

// args are node i's `shoal node start` flags: a worker's etcd endpoints,
// or a voter's member (listen URLs, its proxies as the advertised ones, and
// the initial cluster or the node it joins through).
func (c *Cluster) args(n *clusterNode) launch.Node {
	ln := launch.Node{
		ID:            n.id,
		Listen:        n.addr,
		DataDir:       filepath.Join(n.dir, "data"),
		LeaseTTL:      c.cfg.LeaseTTL,
		Resync:        c.cfg.Resync,
		OrphanGrace:   c.cfg.OrphanGrace,
		Image:         docker.DefaultImage,
		DockerHost:    n.engine.Host,
		MetricsListen: n.metrics,
		Extra:         c.cfg.Args,
	}
	switch {
	case n.proxy != nil:
		ln.EtcdEndpoints = []string{"http://" + n.proxy.Addr()}
	case !n.voter:
		ln.EtcdEndpoints = c.voterClientURLs()
	default:
		ln.Member = &launch.Member{
			ListenClient:    n.listenClient,
			ListenPeer:      n.listenPeer,
			AdvertiseClient: c.scheme() + "://" + n.clientProxy.Addr(),
			AdvertisePeer:   c.scheme() + "://" + n.peerProxy.Addr(),
		}
		if n.join != "" {
			ln.Member.Join = n.join
		} else {
			ln.Member.InitialCluster = c.initialCluster
		}
	}
	if c.cfg.TLS {
		f := c.files(n.id)
		ln.TLS = &launch.TLS{Cert: f.Cert, Key: f.Key, CA: f.CA}
	}
	return ln
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
	fmt.Fprintf(logf, "=== testenv: start %d of node %s\n", n.starts, n.id)
	logf.Close()
	env := slices.Clone(c.cfg.Env)
	if n.engine.Host != "" {
		env = append(env, "DOCKER_HOST="+n.engine.Host)
	}
	// SIGKILL if the test process dies: a node must not outlive its test.
	p, err := launch.Start(launch.Process{Binary: c.bin, Log: c.LogPath(i), Env: env, KillWithParent: true}, c.args(n))
	if err != nil {
		c.t.Fatalf("start node %d: %v", i, err)
	}
	n.setProc(p)
	// The client may be backing off after the last process went away.
	n.conn.ResetConnectBackoff()
}

// shutdown is the cluster's cleanup, once: heal every cut, SIGTERM every
// node at once (one by one, the last voters would wait out a lost quorum),
// SIGKILL what is left after a grace, then remove the nodes' containers
// from every engine (a shared engine keeps everyone else's).
//
// The grace is short with voters: the etcd leader's member, stopping,
// hands its leadership over and waits up to 7s (etcd's request timeout)
// for a peer that is stopping too. Nothing of the test is left to check by
// then, so a SIGKILL after the grace costs nothing.
func (c *Cluster) shutdown() { c.shutdownOnce.Do(c.shutdownNow) }

func (c *Cluster) shutdownNow() {
	if c.cfg.Voters > 0 {
		c.mu.Lock()
		cut := slices.Collect(maps.Keys(c.cut))
		c.mu.Unlock()
		for _, id := range cut {
			c.setCut(slices.IndexFunc(c.nodes, func(n *clusterNode) bool { return n.id == id }), false)
		}
	}
	grace := 30 * time.Second
	if c.cfg.Voters > 0 {
		grace = 3 * time.Second
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		p := n.current()
		if p == nil {
			continue
		}
		wg.Go(func() {
			if !p.Terminate(grace) {
				c.t.Logf("cleanup: node %d (%s) did not stop within %s of SIGTERM; killed it", i, n.id, grace)
			}
			n.setProc(nil)
		})
	}
	wg.Wait()
	c.t.Logf("testenv: nodes stopped in %s", time.Since(t0).Round(time.Millisecond))
	if c.t.Failed() {
		for i, n := range c.nodes {
			c.t.Logf("node %d (%s): last lines of %s:\n%s", i, n.id, c.LogPath(i), engine.Tail(c.LogPath(i), 40))
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

func (c *Cluster) scheme() string {
	if c.cfg.TLS {
		return "https"
	}
	return "http"
}

// files are the certificate files of name (a node id, or a role's client
// certificate) in a TLS cluster's certificates directory.
func (c *Cluster) files(name string) pki.Files {
	return pki.Files{Cert: filepath.Join(c.pki, name+".crt"), Key: filepath.Join(c.pki, name+".key"), CA: filepath.Join(c.pki, "ca.crt")}
}

// TLSFiles are the certificate files of name in a TLS cluster (a node id,
// or "admin", "operator", "viewer"): for the CLI's --tls-* flags.
func (c *Cluster) TLSFiles(name string) pki.Files { return c.files(name) }
