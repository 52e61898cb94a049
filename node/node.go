package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/coordinator"
	"shoal/docker"
	"shoal/embedetcd"
	"shoal/lease"
	"shoal/registry"
	"shoal/store"
)

// The Docker runtime serves every part that needs an engine.
var (
	_ agent.Runtime     = (*docker.Runtime)(nil)
	_ apiserver.Runtime = (*docker.Runtime)(nil)
	_ apiserver.Engine  = (*docker.Runtime)(nil)
)

// Node is one shoal server.
type Node struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}

	mu    sync.Mutex
	addr  string
	etcdE string
	st    *store.Store
	el    *lease.Elector
	ag    *agent.Agent
	// cluster is the cluster id from etcd, once Ready.
	cluster string
}

// clusterIDTimeout bounds the read (or first write) of the cluster id at
// start: an unreachable external etcd fails the start instead of hanging.
const clusterIDTimeout = 30 * time.Second

// ClusterID is the id of the node's cluster, once Ready.
func (n *Node) ClusterID() string { n.mu.Lock(); defer n.mu.Unlock(); return n.cluster }

// New validates cfg and returns a Node ready to Run.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), ready: make(chan struct{})}, nil
}

// Ready is closed once the API serves.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr is the API's address once Ready.
func (n *Node) Addr() string { n.mu.Lock(); defer n.mu.Unlock(); return n.addr }

// EtcdEndpoint is the etcd client URL the node uses, once Ready.
func (n *Node) EtcdEndpoint() string { n.mu.Lock(); defer n.mu.Unlock(); return n.etcdE }

// Store is the node's store, once Ready.
func (n *Node) Store() *store.Store { n.mu.Lock(); defer n.mu.Unlock(); return n.st }

// IsLeader reports whether this node leads now.
func (n *Node) IsLeader() bool {
	n.mu.Lock()
	el := n.el
	n.mu.Unlock()
	return el != nil && el.IsLeader()
}

// OrphansReaped counts orphan containers this node removed.
func (n *Node) OrphansReaped() int {
	n.mu.Lock()
	ag := n.ag
	n.mu.Unlock()
	if ag == nil {
		return 0
	}
	return ag.Reaped()
}

// Run starts the node and blocks until ctx ends, then shuts down in order.
func (n *Node) Run(ctx context.Context) error {
	cfg := n.cfg
	tp := cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}

	// Docker first: without an engine there is nothing to run sandboxes on,
	// and the operator should hear so before anything else starts.
	noEngine := func(err error) error {
		return fmt.Errorf("%v. Start the Docker engine (or point --docker-host / DOCKER_HOST at one) and try again", err)
	}
	if err := docker.Ping(ctx, cfg.DockerHost); err != nil {
		return noEngine(err)
	}

	cli, etcdFatal, closeEtcd, err := n.etcd(ctx)
	if err != nil {
		return err
	}
	defer closeEtcd()

	st := store.New(cli, store.Options{Prefix: cfg.Prefix, Logger: cfg.Logger})
	// The cluster id goes on every container's labels: nodes of separate
	// clusters on one engine (two dev clusters on one host share the host
	// name as node id) must not take each other's containers for orphans.
	cctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
	cluster, err := st.ClusterID(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("read the cluster id from etcd: %w", err)
	}
	rt, err := docker.New(ctx, docker.Config{Host: cfg.DockerHost, Node: cfg.ID, Cluster: cluster, Logger: cfg.Logger})
	if err != nil {
		return noEngine(err)
	}
	defer rt.Close()
	el, err := lease.New(cli, lease.Config{Prefix: st.LeaderPrefix(), TermKey: st.LeaderTermKey(), ID: cfg.ID, TTL: cfg.LeaseTTL, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	// Register before serving: a second node with a live node's id must
	// fail here, with one line naming the holder.
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = lis.Addr().String()
	}
	instance, err := instanceID(cfg.DataDir)
	if err != nil {
		lis.Close()
		return err
	}
	reg, err := registry.New(registry.Config{Store: st, Etcd: cli, TTL: cfg.NodeTTL, Instance: instance, Logger: cfg.Logger,
		Node: &shoalv1.Node{Name: cfg.ID, Address: advertise, Version: cfg.Version, Labels: maps.Clone(cfg.NodeLabels),
			MaxSandboxes: int32(cfg.MaxSandboxes), StartedAt: timestamppb.Now()}})
	if err != nil {
		lis.Close()
		return err
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Runtime: rt, Engine: rt, Node: cfg.ID, Liveness: reg, DefaultImage: cfg.DefaultImage,
		MaxWatches: cfg.MaxWatches, MaxExecs: cfg.MaxExecs, Logger: cfg.Logger, Tracer: tp.Tracer("shoal/apiserver")})
	if err != nil {
		lis.Close()
		return err
	}
	margin := cfg.FenceMargin
	if margin == 0 {
		margin = cfg.NodeTTL
	}
	co, err := coordinator.New(coordinator.Config{Store: st, Elector: el, Resync: cfg.Resync, FenceMargin: margin,
		Logger: cfg.Logger, Tracer: tp.Tracer("shoal/coordinator")})
	if err != nil {
		lis.Close()
		return err
	}
	ag, err := agent.New(agent.Config{Node: cfg.ID, Store: st, Runtime: rt, Lease: reg, FrozenFile: filepath.Join(cfg.DataDir, "frozen-containers"), Resync: cfg.Resync, OrphanGrace: cfg.OrphanGrace,
		StartupWindow: cfg.StartupWindow, Logger: cfg.Logger, Tracer: tp.Tracer("shoal/agent")})
	if err != nil {
		lis.Close()
		return err
	}
	if err := reg.Register(ctx); err != nil {
		lis.Close()
		return err
	}
	gs := grpc.NewServer(api.ServerOptions()...)
	shoalv1.RegisterShoalServer(gs, api)
	var etcdMember string
	if len(cfg.EtcdEndpoints) == 0 {
		etcdMember = n.EtcdEndpoint()
	}
	shoalv1.RegisterClusterServer(gs, apiserver.NewCluster(apiserver.ClusterConfig{Store: st, Etcd: cli, EtcdMember: etcdMember, Logger: cfg.Logger}))

	n.mu.Lock()
	n.addr, n.st, n.el, n.ag, n.cluster = lis.Addr().String(), st, el, ag, cluster
	n.mu.Unlock()

	var debug *http.Server
	if cfg.DebugListen != "" {
		dl, err := net.Listen("tcp", cfg.DebugListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("--debug-listen %s: %w", cfg.DebugListen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		debug = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		debugDone := make(chan struct{})
		go func() { defer close(debugDone); _ = debug.Serve(dl) }()
		defer func() { debug.Close(); <-debugDone }()
	}

	// The loops run until the node stops for any reason: a signal, the
	// API server failing, or the embedded etcd failing.
	runCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	loops, lctx := errgroup.WithContext(runCtx)
	loops.Go(func() error { return reg.Start(lctx) })
	loops.Go(func() error { return co.Start(lctx) })
	loops.Go(func() error { return ag.Start(lctx) })
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	n.log.Info("node started", "api", n.addr, "etcd", n.EtcdEndpoint())
	close(n.ready)

	var runErr error
	select {
	case <-lctx.Done():
		runErr = context.Cause(lctx)
		if ctx.Err() != nil {
			runErr = nil
		}
	case err := <-serveErr:
		runErr = fmt.Errorf("api server: %w", err)
	case err := <-etcdFatal:
		runErr = fmt.Errorf("embedded etcd failed: %w", n.memberErr(err))
	}
	n.log.Info("shutting down", "err", runErr)
	stopLoops()
	// Streams (watches, exec, logs --follow) and waits would hold
	// GracefulStop until ShutdownTimeout: end them now, with UNAVAILABLE,
	// so their clients reconnect elsewhere; unary calls finish normally.
	api.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(cfg.ShutdownTimeout):
		gs.Stop()
		<-stopped
	}
	if err := loops.Wait(); err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = err
	}
	return runErr
}

// etcd connects to external endpoints or starts the embedded member.
// The returned channel reports a fatal error of the embedded member (nil
// for an external etcd: its client reconnects on its own).
func (n *Node) etcd(ctx context.Context) (*clientv3.Client, <-chan error, func(), error) {
	cfg := n.cfg
	if len(cfg.EtcdEndpoints) > 0 {
		cli, err := embedetcd.Dial(cfg.EtcdEndpoints)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--etcd-endpoints: %w", err)
		}
		n.mu.Lock()
		n.etcdE = cfg.EtcdEndpoints[0]
		n.mu.Unlock()
		return cli, nil, func() { cli.Close() }, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("--data-dir: %w", err)
	}
	srv, cli, err := n.startMember(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	n.mu.Lock()
	n.etcdE = srv.Endpoint()
	n.mu.Unlock()
	return cli, srv.Err(), func() { cli.Close(); srv.Close() }, nil
}

// instanceID is this installation's identity in the node registry, kept in
// the data dir: a node restarted on its data dir may take over its own
// previous registration; another node with the same --node-id may not.
func instanceID(dataDir string) (string, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	path := filepath.Join(dataDir, "instance")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	id := uuid.NewString()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	return id, nil
}
