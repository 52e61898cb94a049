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
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/audit"
	"shoal/connlimit"
	"shoal/coordinator"
	"shoal/docker"
	"shoal/embedetcd"
	"shoal/encryption"
	"shoal/events"
	"shoal/hollow"
	"shoal/lease"
	"shoal/metrics"
	"shoal/openshellapi"
	"shoal/pki"
	"shoal/registry"
	"shoal/store"
	"shoal/tracectx"
)

// engine is what the node needs of a container runtime: the Docker
// runtime, or with --runtime hollow the simulated one of package hollow.
type engine interface {
	agent.Runtime
	apiserver.Runtime
	apiserver.Engine
	agent.Pinger
	// Capacity is what the engine has, for the node's registration.
	Capacity(ctx context.Context) (shoal.EngineCapacity, error)
	Close() error
}

var (
	_ engine = (*docker.Runtime)(nil)
	_ engine = (*hollow.Runtime)(nil)
)

// Node is one shoal server.
type Node struct {
	cfg       Config
	transport *pki.Transport      // nil: plaintext
	keys      *encryption.KeyRing // nil: credentials stored as given
	log       *slog.Logger
	ready     chan struct{}

	mu    sync.Mutex
	addr  string
	etcdE string
	// etcdOwn is where this node dials its embedded member
	// (embedetcd.Server.OwnURL); empty without one.
	etcdOwn string
	st      *store.Store
	el      *lease.Elector
	ag      *agent.Agent
	// cluster is the cluster id from etcd, once Ready.
	cluster string
}

// clusterIDTimeout bounds the read (or first write) of the cluster id at
// start: an unreachable external etcd fails the start instead of hanging.
const clusterIDTimeout = 30 * time.Second

// frozenFile, in the data dir, lists the containers the node froze.
const frozenFile = "frozen-containers"

// ClusterID is the id of the node's cluster, once Ready.
func (n *Node) ClusterID() string { n.mu.Lock(); defer n.mu.Unlock(); return n.cluster }

// New validates cfg and returns a Node ready to Run.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr, err := cfg.TLS.Transport()
	if err != nil {
		return nil, err
	}
	if tr.Secure() {
		if err := pki.CheckNode(cfg.TLS.Cert, cfg.ID, cfg.advertisedHosts()...); err != nil {
			return nil, err
		}
	}
	var keys *encryption.KeyRing
	if cfg.EncryptionKeyFile != "" {
		if keys, err = encryption.Load(cfg.EncryptionKeyFile); err != nil {
			return nil, err
		}
	}
	return &Node{cfg: cfg, transport: tr, keys: keys, log: cfg.Logger.With("node", cfg.ID), ready: make(chan struct{})}, nil
}

// Ready is closed once the API serves.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr is the API's address once Ready.
func (n *Node) Addr() string { n.mu.Lock(); defer n.mu.Unlock(); return n.addr }

// EtcdEndpoint is where etcd serves this node, once Ready: its embedded
// member's listen address (host:port, as bound), or the first of
// --etcd-endpoints. Over TLS a member listening on every address is
// dialed at its advertised client URL instead (embedetcd.Server.OwnURL).
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

// Run starts the node and blocks until ctx ends, then shuts down in order:
// assemble builds every part from the config (nothing serves yet), serve
// registers the node and starts the parts, each goroutine owned by the
// running node, and stop ends them in order once a reason to stop comes.
func (n *Node) Run(ctx context.Context) error {
	p, err := n.assemble(ctx)
	defer p.release()
	if err != nil {
		return err
	}
	r, err := n.serve(ctx, p)
	if err != nil {
		return err
	}
	return n.stop(p, r, n.wait(ctx, p, r))
}

// parts is what assemble built: everything the node runs, not yet serving.
type parts struct {
	cli       *clientv3.Client
	etcdFatal <-chan error
	m         *metrics.Metrics // nil without --metrics-listen
	st        *store.Store
	cache     *store.Cache // nil without the watch cache
	cluster   string
	el        *lease.Elector
	reg       *registry.Registry
	api       *apiserver.Server
	co        *coordinator.Coordinator
	ag        *agent.Agent
	ev        *events.Recorder
	gs        *grpc.Server
	lis       net.Listener
	apiLis    *connlimit.Listener
	ml, dl    net.Listener // nil unless --metrics-listen, --debug-listen
	stopGuard func()

	// opened are the listeners; until serving, release closes them.
	opened  []net.Listener
	serving bool
	// closers release, last first, what assemble acquired.
	closers []func()
}

// release closes what assemble acquired, in reverse.
func (p *parts) release() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// listen opens a listener for a flag; none for an empty address.
func (p *parts) listen(flag, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	p.opened = append(p.opened, l)
	return l, nil
}

// assemble builds every part of the node from its config, in the order of
// their dependencies: Docker first, then etcd, the store and the cluster
// id, the runtime, the listeners, and the parts that use them. Nothing
// serves yet. The parts returned hold what was acquired even on error, for
// release.
func (n *Node) assemble(ctx context.Context) (*parts, error) {
	started := time.Now()
	cfg := n.cfg
	p := &parts{}
	tp := cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}

	// Docker first: without an engine there is nothing to run sandboxes on,
	// and the operator should hear so before anything else starts.
	if cfg.Runtime != RuntimeHollow {
		if err := docker.Ping(ctx, cfg.DockerHost); err != nil {
			return p, noEngine(err)
		}
	}

	// A node that ran before and cannot reach etcd freezes its containers
	// if it has not registered within --node-ttl (cutoff.go).
	p.stopGuard = n.guardUnregistered(ctx, started)
	p.closers = append(p.closers, p.stopGuard)
	cli, local, etcdFatal, closeEtcd, err := n.etcd(ctx)
	if err != nil {
		return p, err
	}
	p.closers = append(p.closers, closeEtcd)
	p.cli, p.etcdFatal = cli, etcdFatal

	if cfg.MetricsListen != "" {
		p.m = metrics.New()
	}
	// What the node does to sandboxes is recorded as events: every part
	// gets the one recorder, which writes through a log of its own over
	// the same client (events/doc.go).
	if p.ev, err = events.New(events.Config{Node: cfg.ID, Log: store.NewEventLog(cli, cfg.Prefix), TTL: cfg.EventTTL, Metrics: p.m, Logger: cfg.Logger}); err != nil {
		return p, err
	}
	st := store.New(cli, store.Options{Prefix: cfg.Prefix, Logger: cfg.Logger, Keys: n.keys, Metrics: p.m, Tracer: tp.Tracer("shoal/store"), Events: p.ev, Local: local})
	p.st = st
	if cfg.WatchCache {
		p.cache = st.UseCache(store.CacheOptions{Logger: cfg.Logger})
	}
	// The cluster id goes on every container's labels: nodes of separate
	// clusters on one engine (two dev clusters on one host share the host
	// name as node id) must not take each other's containers for orphans.
	if p.cluster, err = n.clusterID(ctx, st); err != nil {
		return p, err
	}
	cctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
	err = st.AdmitKeyRing(cctx)
	cancel()
	if shoal.KindOf(err) == shoal.KindFailedPrecondition {
		return p, fmt.Errorf("--encryption-key-file: %w", err)
	} else if err != nil {
		return p, fmt.Errorf("read the cluster's encryption record from etcd: %w", err)
	}
	var rt engine
	if cfg.Runtime == RuntimeHollow {
		rt = hollow.New(hollow.Config{Node: cfg.ID, Latency: cfg.HollowLatency})
	} else if rt, err = docker.New(ctx, docker.Config{Host: cfg.DockerHost, Node: cfg.ID, Cluster: p.cluster, Network: cfg.SandboxNetwork,
		LogMaxBytes: cfg.SandboxLogMaxBytes, LogFiles: cfg.SandboxLogFiles, EgressImage: cfg.EgressImage, Logger: cfg.Logger}); err != nil {
		return p, noEngine(err)
	}
	p.closers = append(p.closers, func() { rt.Close() })
	if p.el, err = lease.New(cli, lease.Config{Prefix: st.LeaderPrefix(), TermKey: st.LeaderTermKey(), ID: cfg.ID, TTL: cfg.LeaseTTL, Logger: cfg.Logger}); err != nil {
		return p, err
	}
	// Every listener opens before the node registers: a bad address
	// (--metrics-listen taken) fails the start before anything of the
	// node is in etcd. Until they are served, a failed start closes them.
	p.closers = append(p.closers, func() {
		if !p.serving {
			for _, l := range p.opened {
				l.Close()
			}
		}
	})
	if p.lis, err = p.listen("--listen", cfg.Listen); err != nil {
		return p, err
	}
	// Nobody has authenticated a connection before its handshake: those
	// are bounded (package connlimit), within the files this process may
	// open.
	budget, err := fdBudget()
	if err != nil {
		n.log.Warn("the open-file limit is not known; the API's pending connections are not bounded by it", "err", err)
	}
	if p.apiLis, err = connlimit.Wrap(p.lis, apiConnLimits(cfg, budget, n.log)); err != nil {
		return p, err
	}
	if p.ml, err = p.listen("--metrics-listen", cfg.MetricsListen); err != nil {
		return p, err
	}
	if p.dl, err = p.listen("--debug-listen", cfg.DebugListen); err != nil {
		return p, err
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = p.lis.Addr().String()
	}
	instance, err := instanceID(cfg.DataDir)
	if err != nil {
		return p, err
	}
	// What the engine has goes into the registration, so that placement
	// on any node can skip this one for a sandbox it could never run.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	engineCap, err := rt.Capacity(cctx)
	ccancel()
	if err != nil {
		cfg.Logger.Warn("the engine's capacity is not known; placement will not check it", "err", err)
	}
	if p.reg, err = registry.New(registry.Config{Store: st, Etcd: cli, Metrics: p.m, TTL: cfg.NodeTTL, Instance: instance, Replace: cfg.ReplaceNode, Logger: cfg.Logger,
		Node: &shoalv1.Node{Name: cfg.ID, Address: advertise, Version: cfg.Version, Labels: maps.Clone(cfg.NodeLabels),
			MaxSandboxes: int32(cfg.MaxSandboxes), StartedAt: timestamppb.Now(),
			MaxCpuMillis: cfg.SandboxLimits.MaxCPUMillis, MaxMemoryBytes: cfg.SandboxLimits.MaxMemoryBytes, EncryptionKey: keyID(n.keys),
			EngineCpuMillis: int64(engineCap.NCPU) * 1000, EngineMemoryBytes: engineCap.MemTotal}}); err != nil {
		return p, err
	}
	var auditLog apiserver.Auditor
	if cfg.AuditLog != "" {
		al, err := audit.Open(cfg.AuditLog, audit.Options{MaxBytes: cfg.AuditLogMaxBytes, Backups: cfg.AuditLogBackups})
		if err != nil {
			return p, err
		}
		p.closers = append(p.closers, func() { al.Close() })
		auditLog = al
	}
	if p.api, err = apiserver.New(apiserver.Config{Audit: auditLog, Metrics: p.m, Events: p.ev, Store: st, Runtime: rt, Engine: rt, Node: cfg.ID, Liveness: p.reg, DefaultImage: cfg.DefaultImage,
		MaxWatches: cfg.MaxWatches, MaxExecs: cfg.MaxExecs, MaxStreamsPerClient: perClient(cfg.MaxStreamsPerClient), Transport: n.transport, Logger: cfg.Logger, Tracer: tp.Tracer("shoal/apiserver"), TracerProvider: tp,
		Twins: twins(cfg)}); err != nil {
		return p, err
	}
	margin := cfg.FenceMargin
	if margin == 0 {
		margin = cfg.NodeTTL
	}
	if p.co, err = coordinator.New(coordinator.Config{Store: st, Elector: p.el, Resync: cfg.Resync, FenceMargin: margin, Events: p.ev,
		Logger: cfg.Logger, Tracer: tp.Tracer("shoal/coordinator")}); err != nil {
		return p, err
	}
	engineGrace := cfg.EngineGrace
	if engineGrace == 0 {
		engineGrace = 2 * cfg.NodeTTL
	}
	if p.ag, err = agent.New(agent.Config{Node: cfg.ID, Store: st, Runtime: rt, Lease: p.reg, Engine: rt, Conditions: p.reg, EngineGrace: engineGrace, FrozenFile: filepath.Join(cfg.DataDir, frozenFile), Resync: cfg.Resync, OrphanGrace: cfg.OrphanGrace,
		StartupWindow: cfg.StartupWindow, Limits: cfg.SandboxLimits, Metrics: p.m, Events: p.ev, Egress: egressConfig(cfg, rt, auditLog), Logger: cfg.Logger, Tracer: tp.Tracer("shoal/agent")}); err != nil {
		return p, err
	}
	// otelgrpc continues a caller's trace (W3C traceparent) into the
	// server's spans.
	// The listener's options come after the API's: its Creds replace the
	// API's with the same credentials, wrapped to mark each connection
	// past its handshake.
	opts := append(p.api.ServerOptions(), p.apiLis.ServerOptions(n.transport.ServerCreds())...)
	p.gs = grpc.NewServer(append(opts,
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(tracectx.Propagator))))...)
	shoalv1.RegisterShoalServer(p.gs, p.api)
	n.mu.Lock()
	etcdMember := n.etcdOwn
	n.mu.Unlock()
	shoalv1.RegisterClusterServer(p.gs, apiserver.NewCluster(apiserver.ClusterConfig{Store: st, Etcd: cli, EtcdMember: etcdMember, Transport: n.transport, Keys: n.keys, Events: p.ev, Logger: cfg.Logger}))
	if cfg.OpenShellAPI {
		osh, err := openshellapi.New(openshellapi.Config{API: p.api, Store: st, Version: cfg.Version, Driver: cfg.Runtime, Liveness: p.reg, Logger: cfg.Logger})
		if err != nil {
			return p, err
		}
		openshellapi.Register(p.gs, osh)
	}
	return p, nil
}

// noEngine says what to do about a Docker engine that does not answer.
func noEngine(err error) error {
	return fmt.Errorf("%v. Start the Docker engine (or point --docker-host / DOCKER_HOST at one) and try again", err)
}

// running is what serve started; stop ends it.
type running struct {
	// loops are the long-running parts (cache, registry, coordinator,
	// agent); lctx ends when one fails or stopLoops is called.
	loops     *errgroup.Group
	lctx      context.Context
	stopLoops context.CancelFunc
	// serveErr receives the API server's end; served is closed after.
	serveErr chan error
	served   chan struct{}
	// http are the metrics and debug servers, in the order they started.
	http []httpServing
	// events is the event recorder's Start: it runs until stopEvents,
	// after the loops that record have ended, and returns its error.
	events     chan error
	stopEvents context.CancelFunc
}

// httpServing is an HTTP server and the end of its Serve goroutine.
type httpServing struct {
	srv  *http.Server
	done chan struct{}
}

// serve registers the node (a second node with a live node's id fails
// here, with one line naming the holder, before anything serves), then
// starts every part: the metrics and debug servers, the loops, and the
// API last. Each goroutine it starts is stop's to wait for.
func (n *Node) serve(ctx context.Context, p *parts) (*running, error) {
	cfg := n.cfg
	if err := p.reg.Register(ctx); err != nil {
		return nil, err
	}
	// Registered: from here the agent fences (and thaws what the guard
	// froze). The guard must be done before the agent starts.
	p.stopGuard()

	n.mu.Lock()
	n.addr, n.st, n.el, n.ag, n.cluster = p.lis.Addr().String(), p.st, p.el, p.ag, p.cluster
	n.mu.Unlock()

	r := &running{serveErr: make(chan error, 1), served: make(chan struct{}), events: make(chan error, 1)}
	p.serving = true // the servers below own (and close) the listeners
	if p.m != nil {
		n.observe(p.m, p.st, p.el, p.reg, p.ag, p.ev)
		observeConns(p.m, p.apiLis)
		r.startHTTP(&http.Server{Handler: p.m.Handler(n.readiness(p)), ReadHeaderTimeout: 10 * time.Second}, p.ml)
	}
	if cfg.DebugListen != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.startHTTP(&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, p.dl)
	}

	// The event recorder outlives the loops and the API, which record
	// through it: stop ends it after them, so that it writes their last
	// events.
	ectx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	r.stopEvents = stopEvents
	go func() { r.events <- p.ev.Start(ectx) }()

	// The loops run until the node stops for any reason: a signal, the
	// API server failing, or the embedded etcd failing.
	runCtx, stopLoops := context.WithCancel(ctx)
	r.stopLoops = stopLoops
	r.loops, r.lctx = errgroup.WithContext(runCtx)
	if p.cache != nil {
		r.loops.Go(func() error { return p.cache.Start(r.lctx) })
	}
	r.loops.Go(func() error { return p.reg.Start(r.lctx) })
	r.loops.Go(func() error { return p.co.Start(r.lctx) })
	r.loops.Go(func() error { return p.ag.Start(r.lctx) })
	go func() { defer close(r.served); r.serveErr <- p.gs.Serve(p.apiLis) }()
	n.log.Info("node started", "api", n.addr, "etcd", n.EtcdEndpoint())
	close(n.ready)
	return r, nil
}

func (r *running) startHTTP(srv *http.Server, l net.Listener) {
	h := httpServing{srv: srv, done: make(chan struct{})}
	go func() { defer close(h.done); _ = srv.Serve(l) }()
	r.http = append(r.http, h)
}

// readiness is /readyz's check: the API serves and its listener is not
// saturated, the node holds its lease, its engine answers, and etcd does.
func (n *Node) readiness(p *parts) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-n.ready:
		default:
			return errors.New("the API is not serving yet")
		}
		if err := listenerReady(p.apiLis, time.Now()); err != nil {
			return err
		}
		if !p.reg.Held() {
			return errors.New("this node does not hold its liveness lease")
		}
		if down, _, why := p.ag.EngineDown(); down {
			return fmt.Errorf("%s: %s", store.ConditionEngineUnavailable, why)
		}
		if _, err := p.cli.Get(ctx, p.st.LeaderTermKey(), clientv3.WithCountOnly()); err != nil {
			return fmt.Errorf("etcd: %v", err)
		}
		return nil
	}
}

// wait blocks until there is a reason to stop: ctx ends (nil), a loop
// fails, the API server fails, or the embedded etcd does.
func (n *Node) wait(ctx context.Context, p *parts, r *running) error {
	select {
	case <-r.lctx.Done():
		if ctx.Err() != nil {
			return nil
		}
		return context.Cause(r.lctx)
	case err := <-r.serveErr:
		return fmt.Errorf("api server: %w", err)
	case err := <-p.etcdFatal:
		return fmt.Errorf("embedded etcd failed: %w", n.memberErr(err))
	}
}

// stop shuts the node down in order: the loops are told to return, open
// streams end at once, the API stops taking requests (graceful, then
// forced), the loops are waited for, then the metrics and debug servers
// close; release then closes the rest. It returns runErr, or a loop's
// error if there was none.
func (n *Node) stop(p *parts, r *running, runErr error) error {
	cfg := n.cfg
	n.log.Info("shutting down", "err", runErr)
	r.stopLoops()
	// Streams (watches, exec, logs --follow) and waits would hold
	// GracefulStop until ShutdownTimeout: end them now, with UNAVAILABLE,
	// so their clients reconnect elsewhere; unary calls finish normally.
	p.api.Shutdown()
	stopped := make(chan struct{})
	go func() { p.gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(cfg.ShutdownTimeout):
		p.gs.Stop()
		<-stopped
	}
	<-r.served
	loopsDone := make(chan error, 1)
	go func() { loopsDone <- r.loops.Wait() }()
	var loopsErr error
	select {
	case loopsErr = <-loopsDone:
	case <-time.After(cfg.LeaseTTL + 5*time.Second):
		// etcd's concurrency package cleans up a cancelled campaign with
		// the client's own context (Election.Campaign calls
		// Resign(client.Ctx())), which ends only when the client closes:
		// with etcd unreachable that call, and so the shutdown, would
		// wait forever. Closing the client ends every call stuck on it.
		n.log.Warn("the node's loops still run after the stop; closing its etcd client so that calls stuck on it end")
		_ = p.cli.Close()
		// What the closed client cut short is this stop's doing, not
		// an error of the run.
		if err := <-loopsDone; err != nil {
			n.log.Info("loops ended by the closed etcd client", "err", err)
		}
	}
	// The loops and the API are done recording: the recorder writes what
	// it holds (within its flush timeout) and returns.
	r.stopEvents()
	if err := <-r.events; err != nil {
		n.log.Warn("event recorder", "err", err)
	}
	// Last started, first closed.
	for i := len(r.http) - 1; i >= 0; i-- {
		r.http[i].srv.Close()
		<-r.http[i].done
	}
	if loopsErr != nil && runErr == nil && !errors.Is(loopsErr, context.Canceled) {
		runErr = loopsErr
	}
	return runErr
}

// etcd connects to external endpoints or starts the embedded member.
// The returned channel reports a fatal error of the embedded member (nil
// for an external etcd: its client reconnects on its own); local reads
// through the embedded member in process (nil for an external etcd).
func (n *Node) etcd(ctx context.Context) (cli *clientv3.Client, local store.LocalReader, fatal <-chan error, closeEtcd func(), err error) {
	cfg := n.cfg
	if len(cfg.EtcdEndpoints) > 0 {
		err := n.untilReachable(ctx, "dial etcd", func() (err error) {
			// Another CA's etcd would read as unreachable: say so at
			// once (an error untilReachable does not retry).
			if err := n.checkPeers(ctx, "--etcd-endpoints", cfg.EtcdEndpoints); err != nil {
				return err
			}
			cli, err = embedetcd.Dial(cfg.EtcdEndpoints, embedetcd.WithTLS(n.transport.ClientTLS()))
			if err != nil {
				// It may have come up since the check, with another CA.
				if perr := n.checkPeers(ctx, "--etcd-endpoints", cfg.EtcdEndpoints); perr != nil {
					return perr
				}
			}
			return err
		})
		if ce := (*pki.CertError)(nil); errors.As(err, &ce) {
			return nil, nil, nil, nil, err // names the flag already
		}
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--etcd-endpoints: %w", err)
		}
		n.mu.Lock()
		n.etcdE = cfg.EtcdEndpoints[0]
		n.mu.Unlock()
		return cli, nil, nil, func() { cli.Close() }, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("--data-dir: %w", err)
	}
	srv, cli, err := n.startMember(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	n.mu.Lock()
	n.etcdE, n.etcdOwn = srv.Endpoint(), srv.OwnURL()
	n.mu.Unlock()
	return cli, srv, srv.Err(), func() { cli.Close(); srv.Close() }, nil
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

// observe registers the node's state metrics, read at scrape time.
func (n *Node) observe(m *metrics.Metrics, st *store.Store, el *lease.Elector, reg *registry.Registry, ag *agent.Agent, ev *events.Recorder) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.Gauge("shoal_leader", "1 while this node leads (holds the leader lease).", func() float64 { return b(el.IsLeader()) })
	m.CounterFunc("shoal_leader_terms_total", "Terms this node has begun as leader.", func() float64 { return float64(el.Terms()) })
	m.Gauge("shoal_engine_available", "0 while this node counts its container engine as down (EngineUnavailable), else 1.", func() float64 {
		down, _, _ := ag.EngineDown()
		return b(!down)
	})
	m.Gauge("shoal_node_lease_held", "1 while this node holds its liveness lease.", func() float64 { return b(reg.Held()) })
	m.Gauge("shoal_events_queued", "Sandbox events this node has recorded and not yet written (at most 4096; more are dropped).", func() float64 { return float64(ev.Queued()) })
	if c := st.Cache(); c != nil {
		// From the watch cache's copy only: without it a scrape would
		// read the whole keyspace, so the two gauges are absent.
		m.Labelled("shoal_sandboxes", "Sandboxes by phase and node, as this node's watch cache has them.", []string{"phase", "node"}, func() map[[2]string]float64 {
			c, _, _ := st.SandboxCounts()
			return c
		})
		m.Gauge("shoal_providers", "Providers, as this node's watch cache has them.", func() float64 {
			_, p, _ := st.SandboxCounts()
			return float64(p)
		})
		m.CounterFunc("shoal_watch_cache_reads_served_total", "Reads served from the watch cache.", func() float64 { return float64(c.Stats().Served) })
		m.CounterFunc("shoal_watch_cache_fallbacks_total", "Reads sent to etcd because the watch cache lagged past its bound.", func() float64 { return float64(c.Stats().Fallbacks) })
		m.CounterFunc("shoal_watch_cache_relists_total", "Relists of the watch cache after a compacted resume.", func() float64 { return float64(c.Stats().Relists) })
		m.Gauge("shoal_watch_cache_lag_revisions", "Revisions the watch cache trails the newest etcd revision a read has seen (0: caught up).", func() float64 { return float64(c.Lag()) })
	}
}

// perClient maps the flag's "0: no cap" to the API server's "negative: no
// cap" (its 0 is the default).
func perClient(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// keyID is what a node's registration says of its key ring.
func keyID(r *encryption.KeyRing) string {
	if r == nil {
		return ""
	}
	return r.ID()
}

// twins are the methods of the front ends served beside shoal.v1, mapped
// to the shoal.v1 methods they are authorized as.
func twins(cfg Config) map[string]string {
	if !cfg.OpenShellAPI {
		return nil
	}
	return openshellapi.Twins()
}
