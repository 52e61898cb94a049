package hosts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"shoal/chaos/tcpproxy"
	"shoal/docker"
	"shoal/internal/engine"
	"shoal/internal/launch"
)

// Ports inside each node container (each has an address of its own).
const (
	APIPort        = 7443
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
	// DebugPort serves net/http/pprof (the soak reads goroutine counts).
	DebugPort = 6060
)

// Paths inside each node container.
const (
	dataMount   = "/data"
	dockerMount = "/run/shoal-docker"
)

// ErrRemoved is returned by the faults of a node that ReplaceMember
// removed for good.
var ErrRemoved = errors.New("the node was replaced (ReplaceMember) and is gone for good")

// Cluster is a cluster of shoal nodes as separate hosts on this machine:
// each node in a container of its own on the run's private network, with
// its own address, data dir and Docker engine. Nodes are numbered from 0:
// the voters first, then the workers, then the nodes ReplaceMember
// started. Its methods are safe for concurrent use; faults on one node are
// serialised.
type Cluster struct {
	cfg    Config
	run    string // the run's id, also its node ids' prefix
	sys    *client.Client
	dir    string
	lock   *os.File
	net    privateNetwork
	shared string // why the nodes share the system engine; "" when they do not
	sysEng *engine.Engine
	// engines are the private engines started, for Close (a node that
	// failed to be set up may not hold its own).
	engines []*engine.Engine

	initialCluster string
	// replacing serialises ReplaceMember: a new node's index (its id and
	// address) is taken before it is added.
	replacing sync.Mutex

	mu    sync.Mutex
	nodes []*node
	slow  map[string]time.Duration // SlowPeer in force, by node id

	closeOnce sync.Once
	closeErr  error
}

// node is one host.
type node struct {
	index  int
	id     string
	voter  bool
	addr   netip.Addr
	dir    string // on this machine; its data/ is the node's /data
	engine *engine.Engine
	socket string // the Docker socket the node uses, on this machine
	conn   *grpc.ClientConn
	// peer sits in front of a voter's member's peer port: the member
	// advertises it, so every raft message to or from it passes a proxy
	// that SlowPeer can slow.
	peer *tcpproxy.Proxy
	join string // the API address a replacement joined through

	// fault serialises the faults on the node; it is held for as long
	// as one takes, so nothing else waits on it.
	fault sync.Mutex

	state        sync.Mutex // guards the fields below, briefly
	container    string
	disconnected bool
	removed      bool
}

func (n *node) cid() string {
	n.state.Lock()
	defer n.state.Unlock()
	return n.container
}

func (n *node) isRemoved() bool {
	n.state.Lock()
	defer n.state.Unlock()
	return n.removed
}

func (n *node) isDisconnected() bool {
	n.state.Lock()
	defer n.state.Unlock()
	return n.disconnected
}

// Start builds the node image, makes the network, the engines and the
// node containers, starts every node at once (voters wait for each other)
// and waits until each serves. It first removes what runs that died
// without Close left. On error everything it made is removed again.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkStatic(nodeBinary(cfg.Binary)); err != nil {
		return nil, err
	}
	sys, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("hosts: docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = sys.Ping(pctx)
	cancel()
	if err != nil {
		sys.Close()
		return nil, fmt.Errorf("hosts: no Docker engine is reachable: %w", err)
	}
	for _, img := range cfg.SandboxImages {
		if _, err := sys.ImageInspect(ctx, img); err != nil {
			sys.Close()
			return nil, fmt.Errorf("hosts: the sandbox image %s is not on the system engine (make image): %w", img, err)
		}
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	c = &Cluster{cfg: cfg, run: "h" + hex.EncodeToString(rnd[:]), sys: sys, slow: map[string]time.Duration{}}
	defer func() {
		if err != nil {
			if cerr := c.Close(context.Background()); cerr != nil {
				err = errors.Join(err, fmt.Errorf("hosts: and cleaning up after it: %w", cerr))
			}
			c = nil
		}
	}()
	t0 := time.Now()
	if err := sweepStale(ctx, sys, cfg.Logf); err != nil {
		cfg.Logf("hosts: sweeping earlier runs: %v", err)
	}
	if engine.Unsupported() == "" {
		engine.SweepStale(cfg.Logf)
	}
	if cfg.Dir != "" {
		c.dir = cfg.Dir
		err = os.MkdirAll(c.dir, 0o700)
	} else {
		c.dir, err = os.MkdirTemp("", "shoal-hosts-")
	}
	if err != nil {
		return c, fmt.Errorf("hosts: run dir: %w", err)
	}
	if c.lock, err = lockDir(c.dir); err != nil {
		return c, err
	}
	if err := ensureImage(ctx, sys, cfg.Image, nodeBinary(cfg.Binary), cfg.Logf); err != nil {
		return c, err
	}
	if c.net, err = createNetwork(ctx, sys, "shoal-"+c.run, c.labels()); err != nil {
		return c, err
	}

	n := cfg.Voters + cfg.Workers
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.nodeID(i)
	}
	t1 := time.Now()
	engines, err := c.startEngines(ctx, ids)
	if err != nil {
		return c, err
	}
	if c.shared == "" {
		cfg.Logf("hosts: %d private engines ready in %s", n, time.Since(t1).Round(time.Millisecond))
	}
	var peers []string
	for i := range n {
		nd, err := c.newNode(ctx, i, i < cfg.Voters, engines[i], "")
		if err != nil {
			return c, err
		}
		if nd.voter {
			peers = append(peers, nd.id+"="+peerURL(nd))
		}
	}
	c.initialCluster = strings.Join(peers, ",")
	for _, nd := range c.nodes {
		if err := c.createContainer(ctx, nd); err != nil {
			return c, err
		}
	}
	for _, nd := range c.nodes {
		if err := sys.ContainerStart(ctx, nd.cid(), container.StartOptions{}); err != nil {
			return c, fmt.Errorf("hosts: start node %d (%s): %w", nd.index, nd.id, err)
		}
	}
	for i := range c.nodes {
		if err := c.WaitServing(ctx, i); err != nil {
			return c, err
		}
	}
	cfg.Logf("hosts: %d voters and %d workers serving in %s on %s (run %s, dir %s)",
		cfg.Voters, cfg.Workers, time.Since(t0).Round(time.Millisecond), c.net.subnet, c.run, c.dir)
	return c, nil
}

func (c *Cluster) nodeID(i int) string { return fmt.Sprintf("%s-n%d", c.run, i) }

// labels are on everything the run makes on the system engine.
func (c *Cluster) labels() map[string]string {
	l := map[string]string{LabelRun: c.run, LabelLock: c.dir}
	if !c.cfg.KeepDir {
		l[LabelRemoveDir] = c.dir
	}
	return l
}

// startEngines starts a private engine per id, or falls back to the
// system engine for all of them (Config.SharedEngine, private engines
// unsupported here or failing to start) unless RequireEngines.
func (c *Cluster) startEngines(ctx context.Context, ids []string) ([]*engine.Engine, error) {
	reason := "Config.SharedEngine"
	if !c.cfg.SharedEngine {
		reason = engine.Unsupported()
		if reason == "" {
			engines, err := c.startPrivate(ctx, ids...)
			if err == nil {
				return engines, nil
			}
			reason = err.Error()
		}
		if c.cfg.RequireEngines {
			return nil, fmt.Errorf("hosts: no private Docker engine per node can run (%s) and Config.RequireEngines is set", reason)
		}
	}
	var err error
	if c.sysEng, err = engine.System("system"); err != nil {
		return nil, err
	}
	if c.sysEng.Socket() == "" {
		return nil, fmt.Errorf("hosts: the nodes would share the system engine (%s), but DOCKER_HOST=%s is no unix socket to mount into them", reason, os.Getenv("DOCKER_HOST"))
	}
	c.shared = reason
	c.cfg.Logf("hosts: no private Docker engine per node (%s): every node uses the system engine, told apart only by its node label", reason)
	engines := make([]*engine.Engine, len(ids))
	for i := range engines {
		engines[i] = c.sysEng
	}
	return engines, nil
}

// startPrivate starts a private engine per id and keeps them for Close.
func (c *Cluster) startPrivate(ctx context.Context, ids ...string) ([]*engine.Engine, error) {
	es, err := engine.Start(ctx, c.sys, engine.Options{Images: c.cfg.SandboxImages}, ids...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.engines = append(c.engines, es...)
	c.mu.Unlock()
	return es, nil
}

// newNode sets node i up on this machine (its directory, API client, peer
// proxy if a voter, Docker socket) and adds it to the cluster, where
// Close finds it; its container comes after. join is the API address a
// replacement joins through.
func (c *Cluster) newNode(ctx context.Context, i int, voter bool, e *engine.Engine, join string) (_ *node, err error) {
	n := &node{index: i, id: c.nodeID(i), voter: voter, addr: c.net.nodeAddr(i), engine: e, join: join}
	defer func() {
		if err != nil {
			if n.conn != nil {
				n.conn.Close()
			}
			if n.peer != nil {
				n.peer.Close()
			}
			err = fmt.Errorf("hosts: node %d (%s): %w", i, n.id, err)
		}
	}()
	n.dir = filepath.Join(c.dir, n.id)
	if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o700); err != nil {
		return nil, err
	}
	// A short reconnect backoff: a restarted or reconnected node should be
	// reachable as soon as it listens, not after gRPC's default of up to
	// 2 min.
	n.conn, err = grpc.NewClient(n.apiAddr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	if voter {
		up := net.JoinHostPort(n.addr.String(), strconv.Itoa(EtcdPeerPort))
		if n.peer, err = tcpproxy.Start(up, tcpproxy.WithListen(net.JoinHostPort(c.net.gateway.String(), "0")), tcpproxy.WithSource(c.sourceOf)); err != nil {
			return nil, fmt.Errorf("peer proxy on %s: %w", c.net.gateway, err)
		}
	}
	n.socket = e.Socket()
	if c.cfg.DockerSocket != nil {
		s, err := c.cfg.DockerSocket(ctx, NodeInfo{Index: i, ID: n.id, EngineSocket: n.socket})
		if err != nil {
			return nil, fmt.Errorf("Config.DockerSocket: %w", err)
		}
		if !filepath.IsAbs(s) {
			return nil, fmt.Errorf("Config.DockerSocket gave %q: want an absolute path", s)
		}
		n.socket = s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.peer != nil {
		for id, d := range c.slow {
			n.peer.SetSourceLatency(id, d)
		}
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// sourceOf names the node whose address a peer proxy's connection comes
// from, or "" (this machine, say).
func (c *Cluster) sourceOf(conn net.Conn) string {
	ta, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	ip, _ := netip.AddrFromSlice(ta.IP)
	ip = ip.Unmap()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.addr == ip {
			return n.id
		}
	}
	return ""
}

func (n *node) apiAddr() string {
	return net.JoinHostPort(n.addr.String(), strconv.Itoa(APIPort))
}

func clientURL(n *node) string {
	return "http://" + net.JoinHostPort(n.addr.String(), strconv.Itoa(EtcdClientPort))
}

func peerURL(n *node) string { return "http://" + n.peer.Addr() }

// args are node n's `shoal node start` flags.
func (c *Cluster) args(n *node) []string {
	socket := filepath.Base(n.socket)
	if c.mountsSocketFile(n) {
		socket = "docker.sock"
	}
	ln := launch.Node{
		ID:          n.id,
		DataDir:     dataMount,
		Listen:      "0.0.0.0:" + strconv.Itoa(APIPort),
		Advertise:   n.apiAddr(),
		DebugListen: "0.0.0.0:" + strconv.Itoa(DebugPort),
		DockerHost:  "unix://" + dockerMount + "/" + socket,
		LeaseTTL:    c.cfg.LeaseTTL,
		NodeTTL:     c.cfg.NodeTTL,
		Resync:      c.cfg.Resync,
		OrphanGrace: c.cfg.OrphanGrace,
		FenceMargin: max(c.cfg.FenceMargin, 0),
		LogFormat:   "json",
		// The hosts' network is private to the run: plaintext on it.
		Insecure: true,
		Extra:    append([]string{"--egress-dir", egressDir(n)}, c.cfg.Args...),
	}
	if n.voter {
		ln.Member = &launch.Member{
			ListenClient:    "http://0.0.0.0:" + strconv.Itoa(EtcdClientPort),
			AdvertiseClient: clientURL(n),
			ListenPeer:      "http://0.0.0.0:" + strconv.Itoa(EtcdPeerPort),
			AdvertisePeer:   peerURL(n),
		}
		if n.join != "" {
			ln.Member.Join = n.join
		} else {
			ln.Member.InitialCluster = c.initialCluster
		}
	} else {
		ln.EtcdEndpoints = c.EtcdEndpoints()
	}
	return ln.Args()
}

// egressDir is node n's --egress-dir: the sockets its egress proxy
// serves each sandbox on. Its engine bind-mounts a sandbox's directory
// into that sandbox's sidecar by the path the node gives, so the node
// container has it at the same path as this machine. (A unix socket's
// path has at most 107 bytes: DIR/<uid>/s is some 100 with a default
// temporary directory.)
func egressDir(n *node) string { return filepath.Join(n.dir, "egress") }

// mountsSocketFile: the system engine's socket shares its directory with
// the rest of /run, so it is mounted alone (unless a hook gave a socket of
// its own).
func (c *Cluster) mountsSocketFile(n *node) bool {
	return n.engine.Shared && c.cfg.DockerSocket == nil
}

// createContainer makes node n's container (not started): the node
// image, the run's network at n's address, the data dir, the egress dir
// and the Docker socket's directory bind-mounted, a tmpfs /tmp, logs kept
// by Docker.
func (c *Cluster) createContainer(ctx context.Context, n *node) error {
	if err := os.MkdirAll(egressDir(n), 0o755); err != nil {
		return fmt.Errorf("hosts: node %d (%s): %w", n.index, n.id, err)
	}
	binds := []string{filepath.Join(n.dir, "data") + ":" + dataMount, egressDir(n) + ":" + egressDir(n)}
	if c.mountsSocketFile(n) {
		binds = append(binds, n.socket+":"+dockerMount+"/docker.sock")
	} else {
		binds = append(binds, filepath.Dir(n.socket)+":"+dockerMount)
	}
	labels := c.labels()
	labels[LabelNode] = n.id
	resp, err := c.sys.ContainerCreate(ctx,
		&container.Config{
			Image:    c.cfg.Image,
			Cmd:      c.args(n),
			Env:      c.cfg.Env,
			Hostname: n.id,
			Labels:   labels,
		},
		&container.HostConfig{
			Binds:       binds,
			NetworkMode: container.NetworkMode(c.net.name),
			LogConfig:   container.LogConfig{Type: "json-file"},
			Tmpfs:       map[string]string{"/tmp": ""},
		},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			c.net.name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: n.addr.String()}},
		}},
		nil, "shoal-"+n.id)
	if err != nil {
		return fmt.Errorf("hosts: create the container of node %d (%s): %w", n.index, n.id, err)
	}
	n.state.Lock()
	n.container = resp.ID
	n.state.Unlock()
	return nil
}

// Close removes everything the run made: the node containers (SIGKILL:
// nothing of the run is left to check), the peer proxies, the network,
// the engines with their containers (or, on the shared system engine, the
// nodes' containers), and the run's directory unless KeepDir, in which
// case each node's log is saved there first (DIR/ID/node.log). It reports
// what could not be removed; calls after the first return its result.
func (c *Cluster) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

func (c *Cluster) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	engines := append([]*engine.Engine(nil), c.engines...)
	c.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		id := n.cid()
		if id == "" {
			continue
		}
		wg.Go(func() {
			if info, err := c.sys.ContainerInspect(ctx, id); err == nil && info.State.Running {
				if err := c.sys.ContainerKill(ctx, id, "KILL"); err != nil && !cerrdefs.IsNotFound(err) {
					fail(fmt.Errorf("hosts: kill node %d (%s): %w", n.index, n.id, err))
				}
			}
			if c.cfg.KeepDir {
				if b, err := c.logs(ctx, n); err == nil {
					fail(os.WriteFile(filepath.Join(n.dir, "node.log"), b, 0o600))
				}
			}
			if err := c.sys.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				fail(fmt.Errorf("hosts: remove the container of node %d (%s): %w", n.index, n.id, err))
			}
		})
	}
	wg.Wait()
	for _, n := range nodes {
		if n.conn != nil {
			n.conn.Close()
		}
		if n.peer != nil {
			n.peer.Close()
		}
	}
	if c.net.id != "" {
		if err := c.sys.NetworkRemove(ctx, c.net.id); err != nil && !cerrdefs.IsNotFound(err) {
			fail(fmt.Errorf("hosts: remove network %s: %w", c.net.name, err))
		}
	}
	if c.shared != "" {
		for _, n := range nodes {
			fail(removeLabelled(ctx, c.sys, docker.LabelNode+"="+n.id))
		}
	}
	for _, e := range engines {
		wg.Go(func() { fail(e.Close(ctx)) })
	}
	wg.Wait()
	if c.sysEng != nil {
		c.sysEng.Close(ctx)
	}
	if c.dir != "" && !c.cfg.KeepDir {
		if err := os.RemoveAll(c.dir); err != nil {
			fail(fmt.Errorf("hosts: remove %s: %w", c.dir, err))
		}
	}
	if c.lock != nil {
		c.lock.Close()
	}
	c.sys.Close()
	c.cfg.Logf("hosts: run %s removed in %s", c.run, time.Since(t0).Round(time.Millisecond))
	return errors.Join(errs...)
}
