package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiclient"
	"shoal/chaos/dockerproxy"
	"shoal/chaos/hosts"
	"shoal/chaos/tcpproxy"
	"shoal/docker"
	"shoal/embedetcd"
	"shoal/internal/backoff"
	"shoal/internal/freeport"
	"shoal/internal/launch"
	"shoal/internal/proc"
	"shoal/store"
)

// env is the system under test: a node this run starts as a child process
// (with etcd in this process, behind a fault proxy, and the Docker socket
// behind a fault proxy), a cluster of hosts this run starts (--cluster:
// cluster_env.go), or existing nodes (--endpoint).
type env struct {
	cfg Config

	client shoalv1.ShoalClient
	conn   *swapConn        // under client
	raw    *clientv3.Client // straight to etcd, never through the fault proxy
	st     *store.Store
	docker *client.Client

	// With --cluster: the hosts, their own engines (node id → client),
	// a connection per traffic client (each prefers another node), and
	// when each node's process ran (invariant 9).
	hosts   *hosts.Cluster
	engines map[string]*client.Client
	proxies map[string]*dockerproxy.Proxy
	conns   []*swapConn // one per traffic client
	live    *Liveness
	// noEgress says why the hosts cannot run sandboxes with egress
	// rules (their engines lack the sidecar's image); the egress
	// scenario is then skipped with this reason.
	noEgress string
	// hist is the run's history: a fault that acts on sandboxes as a
	// client would (member-loss's `node remove` deletes the lost node's
	// sandboxes) records those acts in it, so the model knows of them.
	hist *history

	// Only for a node this run owns.
	owned       bool
	etcd        *embedetcd.Server
	etcdProxy   *tcpproxy.Proxy
	dockerProxy *dockerproxy.Proxy
	dir         string
	nodeID      string
	api         string
	debug       string
	logPath     string

	mu   sync.Mutex
	proc *proc.Process
}

// Lease TTL and timings of an owned node: short, so that faults heal fast.
const (
	chaosLeaseTTL    = 3 * time.Second
	chaosResync      = 500 * time.Millisecond
	chaosOrphanGrace = 2 * time.Second
)

func freePort() (int, error) { return freeport.Get() }

func newEnv(ctx context.Context, cfg Config) (*env, error) {
	e := &env{cfg: cfg}
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	e.docker = dc
	switch {
	case cfg.Cluster > 0:
		if err := e.startHosts(ctx); err != nil {
			e.close()
			return nil, err
		}
	case cfg.Endpoint != "":
		if len(cfg.EtcdEndpoints) == 0 {
			return nil, errors.New("--etcd-endpoints: required with --endpoint (the checkers read etcd directly)")
		}
		e.raw, err = embedetcd.Dial(cfg.EtcdEndpoints)
		if err != nil {
			return nil, err
		}
		e.api, e.nodeID = cfg.Endpoint, cfg.NodeID
	default:
		if err := e.startOwned(ctx); err != nil {
			e.close()
			return nil, err
		}
	}
	e.st = store.New(e.raw, store.Options{Prefix: cfg.Prefix})
	e.conn = &swapConn{}
	e.client = shoalv1.NewShoalClient(e.conn)
	e.conns = make([]*swapConn, len(e.addrs()))
	for i := range e.conns {
		e.conns[i] = &swapConn{}
	}
	if err := e.redial(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.waitServing(ctx, time.Minute); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) startOwned(ctx context.Context) error {
	e.owned = true
	dir, err := os.MkdirTemp("", "shoal-chaos-")
	if err != nil {
		return err
	}
	e.dir = dir
	e.nodeID = fmt.Sprintf("chaos-%x", time.Now().UnixNano()&0xffffffff)
	cp, err1 := freePort()
	pp, err2 := freePort()
	ap, err3 := freePort()
	dp, err4 := freePort()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	ec := embedetcd.DefaultConfig(filepath.Join(dir, "etcd"))
	ec.Name = "chaos"
	ec.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", cp)
	ec.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", pp)
	// The fencing check follows the leader keys' history from each
	// scenario's start: keep well over a scenario's worth.
	ec.AutoCompactionRetention = 15 * time.Minute
	if e.etcd, err = embedetcd.Start(ec); err != nil {
		return err
	}
	if e.raw, err = e.etcd.Client(); err != nil {
		return err
	}
	if e.etcdProxy, err = tcpproxy.Start(e.etcd.Endpoint()); err != nil {
		return err
	}
	upstream := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		upstream = strings.TrimPrefix(h, "unix://")
	}
	if e.dockerProxy, err = dockerproxy.Start(filepath.Join(dir, "docker.sock"), upstream); err != nil {
		return err
	}
	e.api = fmt.Sprintf("127.0.0.1:%d", ap)
	e.debug = fmt.Sprintf("127.0.0.1:%d", dp)
	e.logPath = filepath.Join(dir, "node.log")
	return e.startNode()
}

// startNode (re)starts the owned node process on the same data.
func (e *env) startNode() error {
	p, err := launch.Start(launch.Process{Binary: e.cfg.Binary, Log: e.logPath, Env: e.cfg.NodeEnv}, launch.Node{
		// A data dir of its own: the node keeps its egress sockets there
		// and sweeps whatever in it is not its own sandboxes'.
		ID: e.nodeID, Listen: e.api, DebugListen: e.debug, DataDir: filepath.Join(e.dir, "data"),
		EtcdEndpoints: []string{"http://" + e.etcdProxy.Addr()}, Prefix: e.cfg.Prefix,
		DockerHost: "unix://" + filepath.Join(e.dir, "docker.sock"),
		LeaseTTL:   chaosLeaseTTL, Resync: chaosResync, OrphanGrace: chaosOrphanGrace,
		LogFormat: "json", LogLevel: "info",
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.proc = p
	e.mu.Unlock()
	return nil
}

// waitServing polls the API until it answers.
func (e *env) waitServing(ctx context.Context, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	err := backoff.Retry(wctx, harnessRetry, func(int) error {
		cctx, cancel := context.WithTimeout(wctx, 2*time.Second)
		defer cancel()
		_, err := e.client.ListProviders(cctx, &shoalv1.ListProvidersRequest{PageSize: 1})
		return err
	})
	if err != nil {
		return fmt.Errorf("node at %s did not serve within %s: %w", e.api, within, err)
	}
	return nil
}

func (e *env) signal(sig syscall.Signal) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil || e.proc.Exited() {
		return errors.New("no node process")
	}
	e.proc.Signal(sig)
	return nil
}

// kill stops the node process hard and waits for it to be gone.
func (e *env) kill() error {
	e.mu.Lock()
	p := e.proc
	e.mu.Unlock()
	if p == nil || p.Exited() {
		return errors.New("no node process")
	}
	p.Kill()
	return nil
}

// pid of the node process (0 if none).
func (e *env) pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil {
		return 0
	}
	return e.proc.Pid()
}

// clientFor is traffic client id's API client.
func (e *env) clientFor(id int) shoalv1.ShoalClient {
	return shoalv1.NewShoalClient(e.conns[id%len(e.conns)])
}

// redial points the harness's API connections at the nodes as they are
// now (at the start, and after a node was replaced by one at another
// address): the harness's own over all of them, and each traffic client's
// preferring its own node (clients spread over all of them) and moving on
// as the CLI does. Calls in flight finish on the connections they began on.
func (e *env) redial() error {
	addrs := e.addrs()
	c, err := apiclient.Dial(addrs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	e.conn.set(c)
	for i, sc := range e.conns {
		k := i % len(addrs)
		rot := append(slices.Clone(addrs[k:]), addrs[:k]...)
		c, err := apiclient.Dial(rot, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		sc.set(c)
	}
	return nil
}

// swapConn is an API connection whose nodes can be replaced while calls
// go through it; the connections it replaced are closed with it.
type swapConn struct {
	mu      sync.Mutex
	cur     *apiclient.Conn
	retired []*apiclient.Conn
}

var _ grpc.ClientConnInterface = (*swapConn)(nil)

func (s *swapConn) set(c *apiclient.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.retired = append(s.retired, s.cur)
	}
	s.cur = c
}

func (s *swapConn) get() *apiclient.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *swapConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return s.get().Invoke(ctx, method, args, reply, opts...)
}

func (s *swapConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return s.get().NewStream(ctx, desc, method, opts...)
}

func (s *swapConn) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range append(s.retired, s.cur) {
		if c != nil {
			c.Close()
		}
	}
}

// addrs are the API addresses of the nodes under test.
func (e *env) addrs() []string {
	if e.hosts != nil {
		return e.hosts.Addrs()
	}
	var out []string
	for _, a := range strings.Split(e.api, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// containers lists the shoal containers of the node, or of every host.
func (e *env) containers(ctx context.Context) ([]container.Summary, error) {
	if e.hosts != nil {
		return e.hostContainers(ctx)
	}
	return e.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelManaged+"=true"), filters.Arg("label", docker.LabelNode+"="+e.nodeID))})
}

// close stops everything this run started, in reverse order.
func (e *env) close() {
	if e.conn != nil {
		e.conn.Close()
	}
	for _, c := range e.conns {
		c.Close()
	}
	if e.hosts != nil {
		e.closeHosts()
	}
	if e.owned {
		e.mu.Lock()
		p := e.proc
		e.mu.Unlock()
		if p != nil {
			p.Terminate(20 * time.Second)
		}
		if cs, err := e.containers(context.Background()); err == nil {
			for _, c := range cs {
				_ = e.docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
			}
		}
		// And egress sidecars, which the node would have removed with
		// their sandboxes.
		if cs, err := e.docker.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelEgressFor), filters.Arg("label", docker.LabelNode+"="+e.nodeID))}); err == nil {
			for _, c := range cs {
				_ = e.docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
			}
		}
		if e.dockerProxy != nil {
			e.dockerProxy.Close()
		}
		if e.etcdProxy != nil {
			e.etcdProxy.Close()
		}
	}
	if e.raw != nil {
		e.raw.Close()
	}
	if e.etcd != nil {
		e.etcd.Close()
	}
	if e.docker != nil {
		e.docker.Close()
	}
	// The run's own directory (an owned node's, or the hosts' with their
	// Docker proxies' sockets and the nodes' logs); none with --endpoint.
	if e.dir != "" && !e.cfg.KeepData {
		os.RemoveAll(e.dir)
	}
}

// rss and fds of the node process, from /proc.
func procStats(pid int) (rssBytes int64, fds int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, errors.New("statm: short")
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	return pages * int64(os.Getpagesize()), len(ents), nil
}
