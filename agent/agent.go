package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/backoff"
	"shoal/internal/chaosbreak"
	"shoal/metrics"
	"shoal/store"
	"shoal/workqueue"
)

// Store is what the agent needs of the state store.
type Store interface {
	GetSandbox(ctx context.Context, ws, name string) (*shoalv1.Sandbox, error)
	// SandboxRevision is the current mod revision of a sandbox's record
	// (a linearizable read of the key alone): the egress proxy's check
	// that the policy it holds is the current one.
	SandboxRevision(ctx context.Context, ws, name string) (int64, error)
	ListSandboxes(ctx context.Context, ws string, o store.ListOptions, keep func(*shoalv1.Sandbox) bool) (store.Page[*shoalv1.Sandbox], error)
	UpdateSandbox(ctx context.Context, ws, name string, pre store.Preconditions, mutate func(*shoalv1.Sandbox) error) (*shoalv1.Sandbox, error)
	// WatchNodeSandboxes streams the changes of this node's sandboxes.
	WatchNodeSandboxes(ctx context.Context, node string, fromRev int64) <-chan store.Event[*shoalv1.Sandbox]
	// WatchProviders streams provider changes (credential files follow
	// them, credfiles.go).
	WatchProviders(ctx context.Context, fromRev int64) <-chan store.Event[*shoalv1.Provider]
	GetProvider(ctx context.Context, ws, name string) (*shoalv1.Provider, error)
	// OpenCredentials decrypts a provider's credentials (sealed at rest).
	OpenCredentials(p *shoalv1.Provider) (map[string]string, error)
	RecordTeardown(ctx context.Context, ws, name, uid string) error
}

var _ Store = (*store.Store)(nil)

// Runtime is what the agent needs of the container runtime.
type Runtime interface {
	Run(ctx context.Context, s shoal.ContainerSpec) (string, error)
	RemoveContainer(ctx context.Context, id string) error
	List(ctx context.Context) ([]shoal.Container, error)
	Inspect(ctx context.Context, id string) (shoal.ContainerState, error)
	Events(ctx context.Context) (<-chan shoal.ContainerEvent, <-chan error)
	// Remove removes this node's containers of a sandbox uid.
	Remove(ctx context.Context, uid string) error
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	// Stop stops a running container (SIGTERM, SIGKILL after grace) and
	// keeps it; Start starts a stopped one again and waits up to settle
	// for a command that ends at once (runstate.go).
	Stop(ctx context.Context, id string, grace time.Duration) error
	Start(ctx context.Context, id string, settle time.Duration) error
	// Refresh gives a stopped container the environment s.Env before a
	// start: the same id when it has it already, else the id of a new
	// container made from its files; the old one stays until
	// RemoveContainer (runstate.go).
	Refresh(ctx context.Context, id string, s shoal.ContainerSpec) (string, error)
	// WriteCredentialFiles replaces a running container's credential
	// files (credfiles.go): provider → key → value.
	WriteCredentialFiles(ctx context.Context, id string, files map[string]map[string]string) error
	// ReapExecs kills the execs in a container that an earlier run of
	// this node started and that still run (execs.go).
	ReapExecs(ctx context.Context, id string) ([]shoal.ReapedExec, error)
}

// Lease is this node's registration (package registry) as the agent needs
// it: whether the node holds its liveness lease now (renewed within its
// TTL), and a generation that moves each time it registers again.
type Lease interface {
	State() (held bool, generation uint64)
}

// Config of an Agent.
type Config struct {
	Node    string
	Store   Store
	Runtime Runtime
	// Lease gates every change the agent makes to its containers other
	// than removing them (freeze.go). Required.
	Lease Lease
	// LeaseCheck is how often the lease is looked at (default 100ms): a
	// node that stops holding it freezes its containers within this.
	LeaseCheck time.Duration
	// FrozenFile, if set, is where the ids of the containers frozen by the
	// agent are kept, so that a node restarted while frozen thaws them.
	FrozenFile string
	// Workers provision and sync sandboxes in parallel.
	Workers int
	// Resync compares every sandbox of this node with its container this
	// often, and looks for orphans.
	Resync time.Duration
	// ReconcileTimeout bounds one reconcile of a sandbox (default
	// DefaultReconcileTimeout); past it the reconcile fails and is tried
	// again.
	ReconcileTimeout time.Duration
	// OrphanGrace is how long a container must be seen without a record
	// before it is reaped.
	OrphanGrace time.Duration
	// StartupWindow is how long a sandbox with its own command is watched
	// after its start before it is reported READY: a command that ends
	// within it (`create --wait -- true`) is reported STOPPED with its exit
	// code instead of READY. Sandboxes that run the image's own command
	// (the long-running agent) are not held back, so the usual
	// create-to-READY path pays nothing. Docker learns of an exit some
	// 100 ms after it happens.
	StartupWindow time.Duration
	// Limits are the sandboxes' resource defaults and this node's maximums.
	Limits shoal.SandboxLimits
	// Metrics, if set, times provisioning and teardown and counts reaps.
	Metrics *metrics.Metrics
	// Events, if set, records what the agent did and saw (events.go).
	Events Events
	// Engine is pinged every EngineCheck (default DefaultEngineCheck); an
	// engine that has not answered for EngineGrace (default
	// DefaultEngineGrace; the node passes 2 × its TTL) is down
	// (engine.go), which Conditions publishes. Without Engine the agent
	// does not watch its engine.
	Engine      Pinger
	Conditions  Conditions
	EngineCheck time.Duration
	EngineGrace time.Duration
	// RestartDelay and MaxRestartDelay bound the backoff before a broken
	// sandbox watch or Docker event stream is opened again.
	RestartDelay    time.Duration
	MaxRestartDelay time.Duration
	// Egress, if set, enforces the sandboxes' egress policies (egress.go);
	// without it a sandbox with rules is reported not enforced (it keeps
	// no network at all).
	Egress *EgressConfig
	Logger *slog.Logger
	Tracer trace.Tracer
}

// DefaultStartupWindow is Config.StartupWindow's default.
const DefaultStartupWindow = 500 * time.Millisecond

// Agent is the node-local reconciler.
type Agent struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	orphans  map[string]time.Time // container id → first seen orphaned
	reaped   int
	attempts map[string]int    // sandbox uid → failed provisioning attempts
	credFP   map[string]string // sandbox uid → fingerprint of its credential files (credfiles.go)

	// Owned by Start's loop (freeze.go).
	frozen  bool
	gen     uint64          // the registration the containers were last reconciled under
	paused  map[string]bool // container ids freeze paused
	retryAt time.Time       // no lease action before this, after one failed
	// rejoined is closed after the first rejoin (execs.go waits for it).
	rejoined     chan struct{}
	rejoinedOnce sync.Once

	engine engineHealth // engine.go

	// life is Start's context and queue: what outlives one reconcile's
	// deadline (a stop's grace, runstate.go) still ends with the agent and
	// queues its sandbox when it is done. bg holds those goroutines; Start
	// waits for them.
	life  context.Context
	queue *workqueue.Queue[item]
	bg    sync.WaitGroup
	stops map[string]*stopping // sandbox uid → its stop in flight (under mu)

	tornDown  recent // events.go: the teardowns recorded as events
	frozenIDs recent // events.go: the containers freeze paused

	egress *egressState // egress.go; nil without Config.Egress
}

// runTimeout bounds one container create and start, which shutdown
// waits for.
const runTimeout = 30 * time.Second

// DefaultReconcileTimeout bounds one reconcile of a sandbox (its reads, its
// container calls, its status write), and stepTimeout one resync, freeze
// or rejoin. A call that hangs (an engine or an etcd connection that
// stopped answering) then fails and is tried again, instead of holding
// the sandbox's key, or the agent's loop, for good: the workqueue runs
// one reconcile per name at a time, so a hung one would hold every later
// sandbox of that name too, its deletion included.
const (
	DefaultReconcileTimeout = runTimeout + 30*time.Second
	stepTimeout             = 30 * time.Second
)

// MaxProvisionAttempts is how often a container start is tried before the
// sandbox is put in ERROR.
const MaxProvisionAttempts = 5

// attempt counts one failed provisioning attempt and returns the count.
func (a *Agent) attempt(uid string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts[uid]++
	n := a.attempts[uid]
	if n >= MaxProvisionAttempts {
		delete(a.attempts, uid)
	}
	return n
}

// New validates cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.Node == "" || cfg.Store == nil || cfg.Runtime == nil || cfg.Lease == nil {
		return nil, errors.New("agent: node, store, runtime and lease are required")
	}
	if cfg.LeaseCheck <= 0 {
		cfg.LeaseCheck = 100 * time.Millisecond
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.ReconcileTimeout <= 0 {
		cfg.ReconcileTimeout = DefaultReconcileTimeout
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = 30 * time.Second
	}
	if cfg.StartupWindow <= 0 {
		cfg.StartupWindow = DefaultStartupWindow
	}
	if cfg.RestartDelay <= 0 {
		cfg.RestartDelay = 100 * time.Millisecond
	}
	if cfg.MaxRestartDelay < cfg.RestartDelay {
		cfg.MaxRestartDelay = max(30*time.Second, cfg.RestartDelay)
	}
	if cfg.EngineCheck <= 0 {
		cfg.EngineCheck = DefaultEngineCheck
	}
	if cfg.EngineGrace <= 0 {
		cfg.EngineGrace = DefaultEngineGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("shoal/agent")
	}
	if e := cfg.Egress; e != nil {
		if e.Dir == "" || e.Runtime == nil {
			return nil, errors.New("agent: egress needs a directory and a runtime")
		}
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("subsystem", "agent", "node", cfg.Node), orphans: map[string]time.Time{}, attempts: map[string]int{}, credFP: map[string]string{},
		paused: map[string]bool{}, rejoined: make(chan struct{}), stops: map[string]*stopping{}}
	a.egress = a.newEgress()
	return a, nil
}

// Reaped is the number of orphan containers removed so far.
func (a *Agent) Reaped() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reaped
}

type item struct{ ws, name string }

func (i item) key() string { return i.ws + "/" + i.name }

// Start runs the loops until ctx ends.
func (a *Agent) Start(ctx context.Context) error {
	// What an earlier process (or the node's guard before it registered,
	// node/cutoff.go) froze: thawed when the node rejoins.
	for id := range loadFrozen(a.cfg.FrozenFile) {
		a.paused[id] = true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer a.bg.Wait() // the stops in flight, after the cancel below
	q := workqueue.New(item.key)
	a.life, a.queue = ctx, q
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, a.cfg.Workers, func(it item) time.Duration {
			rctx, rcancel := context.WithTimeout(ctx, a.cfg.ReconcileTimeout)
			defer rcancel()
			if err := a.reconcile(rctx, it); err != nil && ctx.Err() == nil {
				a.log.Warn("reconcile failed; will retry", "sandbox", it.key(), "err", err)
				return time.Second
			}
			return 0
		})
	}()

	// A broken stream is opened again after a backoff, not at once: a
	// watch that breaks as soon as it opens (etcd without a leader, an
	// engine that refuses the events call) must not spin.
	// Each stream has a context of its own under ctx, so that a broken
	// one is stopped (its context released) without ending the other.
	var sandboxes <-chan store.Event[*shoalv1.Sandbox]
	var devents <-chan shoal.ContainerEvent
	var derrs <-chan error
	var sandboxWatch *store.Watch[store.Event[*shoalv1.Sandbox]]
	var eventWatch *store.Watch[shoal.ContainerEvent]
	var providers <-chan store.Event[*shoalv1.Provider]
	var providerWatch *store.Watch[store.Event[*shoalv1.Provider]]
	byUID := map[string]item{}  // container uid label → sandbox, for events
	users := newProviderUsers() // provider → sandboxes, for credential files
	restart := backoff.Policy{Initial: a.cfg.RestartDelay, Max: a.cfg.MaxRestartDelay}
	watchBO := &streamBackoff{p: restart}
	eventsBO := &streamBackoff{p: restart}
	providersBO := &streamBackoff{p: restart}
	var providersRev int64
	// A broken watch resumes after the last revision it delivered, so
	// nothing is listed again; only the first watch, and one whose
	// revision was compacted away, start from 0, which replays every
	// record first, so byUID is rebuilt from scratch and drops sandboxes
	// deleted meanwhile.
	var lastRev int64
	openWatch := func() {
		if lastRev == 0 {
			clear(byUID)
			users.reset()
		}
		watchBO.opened(time.Now())
		wctx, wcancel := context.WithCancel(ctx)
		sandboxWatch = store.NewWatch(wcancel, a.cfg.Store.WatchNodeSandboxes(wctx, a.cfg.Node, lastRev))
		sandboxes = sandboxWatch.C
	}
	openEvents := func() {
		eventsBO.opened(time.Now())
		ectx, ecancel := context.WithCancel(ctx)
		var ch <-chan shoal.ContainerEvent
		ch, derrs = a.cfg.Runtime.Events(ectx)
		eventWatch = store.NewWatch(ecancel, ch)
		devents = eventWatch.C
	}
	openProviders := func() {
		providersBO.opened(time.Now())
		pctx, pcancel := context.WithCancel(ctx)
		providerWatch = store.NewWatch(pcancel, a.cfg.Store.WatchProviders(pctx, providersRev))
		providers = providerWatch.C
	}
	openWatch()
	openEvents()
	openProviders()
	defer func() {
		// Stop both streams and wait for their goroutines (a broken one
		// was stopped when it broke).
		if sandboxWatch != nil {
			sandboxWatch.Stop()
		}
		if eventWatch != nil {
			eventWatch.Stop()
		}
		if providerWatch != nil {
			providerWatch.Stop()
		}
	}()
	rewatch := newIdleTimer()
	defer rewatch.Stop()
	resubscribe := newIdleTimer()
	defer resubscribe.Stop()
	rewatchProviders := newIdleTimer()
	defer rewatchProviders.Stop()
	tick := time.NewTicker(a.cfg.Resync)
	defer tick.Stop()
	// The lease is watched on its own: the loop below may wait on etcd
	// (a resync while cut off), and freezing must not.
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.fence(ctx, q)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.watchEngine(ctx, q)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.sweepExecs(ctx)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sandboxes:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return nil
				}
				sandboxWatch.Stop()
				sandboxWatch, sandboxes = nil, nil
				if shoal.KindOf(ev.Err) == shoal.KindGone {
					lastRev = 0
				}
				d := watchBO.next(time.Now())
				a.log.Warn("sandbox watch broke; restarting it", "err", ev.Err, "after", d)
				rewatch.Reset(d)
				continue
			}
			lastRev = max(lastRev, ev.Revision)
			sb := ev.Object
			it := item{sb.Meta.Workspace, sb.Meta.Name}
			if ev.Type == shoalv1.EventType_DELETED {
				delete(byUID, sb.Meta.Uid)
				users.set(it, nil)
				continue
			}
			byUID[sb.Meta.Uid] = it
			attached := users.set(it, sb) // an attach or detach: its files change
			if sb.Meta.DeletionTimestamp != nil || sb.Status.Phase == shoalv1.SandboxPhase_PROVISIONING || runStatePending(sb) || attached || sb.EgressPending() {
				q.Add(it)
			}
		case <-rewatch.C:
			openWatch()
		case ev, ok := <-devents:
			if !ok {
				devents = nil
				continue
			}
			if it, known := byUID[ev.UID]; known && changesState(ev.Action) {
				q.Add(it)
			}
		case err, ok := <-derrs:
			if ctx.Err() != nil {
				return nil
			}
			// Events sends at most one error, then closes both channels;
			// a close without an error is a stream that ended as well.
			eventWatch.Stop()
			eventWatch, devents, derrs = nil, nil, nil
			if !ok {
				err = errors.New("event stream ended")
			}
			d := eventsBO.next(time.Now())
			a.log.Warn("docker event stream broke; resubscribing", "err", err, "after", d)
			resubscribe.Reset(d)
		case <-resubscribe.C:
			openEvents()
		case ev, ok := <-providers:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return nil
				}
				providerWatch.Stop()
				providerWatch, providers = nil, nil
				if shoal.KindOf(ev.Err) == shoal.KindGone {
					providersRev = 0
				}
				d := providersBO.next(time.Now())
				a.log.Warn("provider watch broke; restarting it", "err", ev.Err, "after", d)
				rewatchProviders.Reset(d)
				continue
			}
			providersRev = max(providersRev, ev.Revision)
			// A rotation, or a provider gone: the files of the sandboxes
			// of this node that use it change (credfiles.go).
			for _, it := range users.users(ev.Object.GetMeta().GetWorkspace(), ev.Object.GetMeta().GetName()) {
				q.Add(it)
			}
		case <-rewatchProviders.C:
			openProviders()
		case <-tick.C:
			a.resync(ctx, q)
		}
	}
}

// changesState reports whether a container event can mean a change of the
// container's state. Execs, copies, attaches and resizes cannot: a busy
// sandbox's execs would otherwise each cost a reconcile (an inspect and a
// status read), and hide a missing trigger in tests that poll with execs.
func changesState(action string) bool {
	switch {
	case strings.HasPrefix(action, "exec_"), action == "archive-path", action == "extract-to-dir",
		action == "attach", action == "detach", action == "resize", action == "top", action == "export":
		return false
	}
	return true
}

// newIdleTimer returns a stopped timer, to be Reset when needed.
func newIdleTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// streamBackoff is the delay before a broken stream is opened again: its
// Policy's delay grows with each break (doubling from Initial up to Max),
// and starts over from Initial once a stream has lived longer than Max
// (it was healthy, the break is news).
type streamBackoff struct {
	p      backoff.Policy
	breaks int       // breaks since the last healthy stream
	since  time.Time // when the current stream was opened
}

func (b *streamBackoff) opened(now time.Time) { b.since = now }

func (b *streamBackoff) next(now time.Time) time.Duration {
	if now.Sub(b.since) > b.p.Max {
		b.breaks = 0
	}
	d := b.p.Delay(b.breaks)
	b.breaks++
	return d
}

// resync queues every sandbox of this node and reaps orphans. Containers
// are listed before records: a container is only created after its record,
// so a container missing from the later record list has no record.
func (a *Agent) resync(ctx context.Context, q *workqueue.Queue[item]) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	cs, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		a.log.Warn("resync: list containers", "err", err)
		return
	}
	page, err := a.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return store.NodeOf(sb) == a.cfg.Node
	})
	if err != nil {
		a.log.Warn("resync: list sandboxes", "err", err)
		return
	}
	known := map[string]bool{}
	recorded := map[string]string{} // uid → the container its record names
	withEgress := map[string]bool{} // uid → has egress rules, runs, and is not being deleted
	for _, sb := range page.Items {
		known[sb.Meta.Uid] = true
		withEgress[sb.Meta.Uid] = sb.HasEgress() && sb.Meta.DeletionTimestamp == nil && sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_READY
		recorded[sb.Meta.Uid] = sb.GetStatus().GetContainerId()
		q.Add(item{sb.Meta.Workspace, sb.Meta.Name})
	}
	now := time.Now()
	a.mu.Lock()
	for uid := range a.attempts {
		if !known[uid] {
			delete(a.attempts, uid)
		}
	}
	for uid := range a.credFP {
		if !known[uid] {
			delete(a.credFP, uid)
		}
	}
	seen := map[string]bool{}
	var reap []shoal.Container
	for _, c := range cs {
		if known[c.UID] && !replaced(c.ID, recorded[c.UID]) {
			continue
		}
		seen[c.ID] = true
		first, ok := a.orphans[c.ID]
		if !ok {
			a.orphans[c.ID] = now
			continue
		}
		if now.Sub(first) >= a.cfg.OrphanGrace {
			reap = append(reap, c)
		}
	}
	for id := range a.orphans {
		if !seen[id] {
			delete(a.orphans, id)
		}
	}
	a.mu.Unlock()
	a.egressResync(ctx, withEgress)
	for _, c := range reap {
		// Re-check the record by name: the lists above are a snapshot. Only
		// a record that is gone, or is another uid's, makes the container
		// an orphan; a record that cannot be read now (etcd trouble, or a
		// corrupt value whose uid is unknown) spares it.
		sb, err := a.cfg.Store.GetSandbox(ctx, c.Workspace, c.Name)
		if err == nil && sb.Meta.Uid == c.UID && !replaced(c.ID, sb.GetStatus().GetContainerId()) ||
			err != nil && shoal.KindOf(err) != shoal.KindNotFound {
			continue
		}
		remove := func() error { return a.cfg.Runtime.RemoveContainer(ctx, c.ID) }
		if err != nil || sb.Meta.Uid != c.UID {
			// No sandbox of this uid: everything the node holds of it
			// goes, its committed images too (docker/refresh.go).
			remove = func() error { return a.cfg.Runtime.Remove(ctx, c.UID) }
		}
		if err := remove(); err != nil {
			a.log.Warn("reap orphan", "container", c.ID[:12], "err", err)
			continue
		}
		a.log.Info("reaped orphan container", "container", c.ID[:12], "uid", c.UID, "name", c.Name)
		a.mu.Lock()
		delete(a.orphans, c.ID)
		a.reaped++
		a.mu.Unlock()
		a.cfg.Metrics.OrphanReaped()
	}
}

// replaced reports whether a container of a sandbox is not the one its
// record names (recorded): one that a refresh replaced (runstate.go), left
// by a node stopped between recording the new container and removing
// the old, or made by a refresh whose record was never written. Before a
// container is recorded (provisioning) none is.
func replaced(id, recorded string) bool {
	return recorded != "" && id != recorded
}

// reconcile brings one sandbox's status in line with its container,
// creating the container first if the sandbox is PROVISIONING.
func (a *Agent) reconcile(ctx context.Context, it item) error {
	sb, err := a.cfg.Store.GetSandbox(ctx, it.ws, it.name)
	switch shoal.KindOf(err) {
	case shoal.KindNotFound:
		return nil
	case shoal.KindDataLoss:
		// Corrupt: nothing to reconcile until it is deleted (its deletion
		// is an event), and retrying would only log it again and again.
		return nil
	}
	if err != nil {
		return err
	}
	if store.NodeOf(sb) != a.cfg.Node {
		return nil
	}
	if a.engineIsDown() {
		// Nothing is asked of an engine that does not answer; every
		// sandbox is queued again when it does (engine.go).
		return a.engineGone(ctx, sb)
	}
	if sb.Meta.DeletionTimestamp != nil {
		return a.teardown(ctx, sb)
	}
	// Anything but removal waits until the node holds its lease: a node cut
	// off, or a process resumed after a stop, may hold stale records.
	if held, _ := a.cfg.Lease.State(); !held {
		return nil // queued again when the node holds it (freeze.go: rejoin)
	}
	if sb.Status.Phase == shoalv1.SandboxPhase_PROVISIONING ||
		sb.Status.Phase == shoalv1.SandboxPhase_UNKNOWN && sb.Status.GetContainerId() == "" {
		// (UNKNOWN without a container: the node was lost while it
		// provisioned; Run finds a container it made by its name.)
		return a.provision(ctx, sb)
	}
	return a.syncStatus(ctx, sb)
}

// teardown is the owner's step of the deletion protocol (store/deletion.go):
// remove the container, then record that it is gone, so the leader may
// remove the record.
func (a *Agent) teardown(ctx context.Context, sb *shoalv1.Sandbox) error {
	ctx, span := a.cfg.Tracer.Start(ctx, "agent.Teardown")
	defer span.End()
	defer func(start time.Time) { a.cfg.Metrics.Teardown(time.Since(start)) }(time.Now())
	// A stop in flight is not waited out: the removal kills the container.
	a.cancelStop(sb.Meta.Uid)
	if err := a.closeEgress(sb.Meta.Uid); err != nil {
		return err
	}
	if err := a.cfg.Runtime.Remove(ctx, sb.Meta.Uid); err != nil {
		a.record(sb, events.Event{Reason: events.FailedTeardown, Message: "removing the container failed; trying again: " + err.Error()})
		return err
	}
	if err := a.cfg.Store.RecordTeardown(ctx, sb.Meta.Workspace, sb.Meta.Name, sb.Meta.Uid); err != nil {
		return err
	}
	a.recordTornDown(sb)
	return nil
}

func (a *Agent) provision(ctx context.Context, sb *shoalv1.Sandbox) error {
	ctx, span := a.cfg.Tracer.Start(ctx, "agent.Provision")
	defer span.End()
	defer func(start time.Time) { a.cfg.Metrics.Provision(time.Since(start)) }(time.Now())
	env, secrets, reason, err := a.containerEnv(ctx, sb)
	if err != nil {
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			st.Phase = shoalv1.SandboxPhase_ERROR
			st.Message = err.Error()
			store.SetCondition(st, "Provisioned", "False", reason, err.Error())
		})
	}
	spec := sb.GetSpec()
	cpu, mem, err := resources(a.cfg.Limits, spec.GetResources())
	if err != nil {
		msg := err.Error()
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			st.Phase = shoalv1.SandboxPhase_ERROR
			st.Message = msg
			store.SetCondition(st, "Provisioned", "False", "OverNodeMaximum", msg)
		})
	}
	var settle time.Duration
	if len(spec.GetCommand()) > 0 {
		settle = a.cfg.StartupWindow
	}
	// The container is made even if the node shuts down meanwhile: the
	// engine finishes a create whose caller hung up, and that container
	// would then appear after the agent has stopped, created but never
	// started. Shutdown waits for the call instead (bounded).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runTimeout)
	defer cancel()
	// A sandbox stopped before its container was made gets one that
	// never ran (start runs it).
	id, err := a.cfg.Runtime.Run(rctx, shoal.ContainerSpec{
		UID: sb.Meta.Uid, Name: sb.Meta.Name, Workspace: sb.Meta.Workspace,
		Image: spec.GetImage(), Command: spec.GetCommand(), Env: env, Secrets: secrets, Egress: sb.HasEgress(),
		CPUMillis: cpu, MemoryBytes: mem, PidsLimit: a.cfg.Limits.Pids, ReadOnlyRoot: spec.GetReadOnlyRoot(),
		Settle: settle, Created: wantStopped(sb) && !chaosbreak.Is("ack-before-stop"),
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A Docker hiccup is retried (the queue backs off); what Docker
		// refused (a missing image, limits it rejects, a command it
		// cannot start) or repeated failure is reported as ERROR, in
		// Docker's words: Run has scrubbed them of credentials.
		permanent := shoal.KindOf(err) == shoal.KindFailedPrecondition
		if !permanent && a.engineUnreachable(ctx) {
			// Not this sandbox's fault: it is provisioned when the engine
			// answers again, however long that takes (engine.go), and the
			// attempt is not counted against it.
			return fmt.Errorf("provision %s: the engine does not answer: %w", sb.Meta.Name, err)
		}
		if !permanent {
			if n := a.attempt(sb.Meta.Uid); n < MaxProvisionAttempts {
				a.record(sb, events.Event{Reason: events.Failed, Message: fmt.Sprintf("starting the container failed (attempt %d of %d; it is tried again): %v", n, MaxProvisionAttempts, err)})
				return fmt.Errorf("provision %s: %w", sb.Meta.Name, err)
			}
		}
		msg := err.Error()
		if !permanent {
			msg = fmt.Sprintf("container could not be started after %d attempts: %v", MaxProvisionAttempts, err)
		}
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			st.Phase = shoalv1.SandboxPhase_ERROR
			st.ContainerId = id
			st.Message = msg
			store.SetCondition(st, "Provisioned", "False", "RuntimeError", msg)
		})
	}
	a.mu.Lock()
	delete(a.attempts, sb.Meta.Uid)
	a.mu.Unlock()
	a.record(sb, events.Event{Reason: events.Created, Message: fmt.Sprintf("created container %s from image %s", short(id), spec.GetImage()),
		Details: map[string]string{"container_id": id, "image": spec.GetImage()}})
	// Report what the container is doing now, not what it was asked to
	// do: a command that already ended is STOPPED (or ERROR), never READY.
	// If it ends after this look, its die event queues this sandbox again
	// and, since the queue runs one key at a time, that sync comes after
	// this write and corrects it.
	state, err := a.cfg.Runtime.Inspect(ctx, id)
	if err != nil {
		return err
	}
	// The credential files are there before the sandbox is READY.
	if err := a.syncCredentialFiles(ctx, sb, id, state); err != nil {
		a.log.Warn("credential files not written; will retry", "sandbox", sb.Meta.Name, "err", err)
	}
	gen := spec.GetRunGeneration()
	if err := a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
		st.ContainerId = id
		store.SetCondition(st, "Provisioned", "True", "ContainerStarted", "")
		observe(st, id, state)
		if wantStopped(sb) {
			if chaosbreak.Is("ack-before-stop") {
				// Broken on purpose (test builds only): ran, and
				// recorded as stopped.
				st.Phase = shoalv1.SandboxPhase_STOPPED
			}
			observeRunState(st, sb, gen, state)
		}
	}); err != nil {
		return err
	}
	// Deleted or replaced while the container started: its teardown may
	// already have run, so remove the container now rather than leave it to
	// the orphan reaper.
	cur, err := a.cfg.Store.GetSandbox(ctx, sb.Meta.Workspace, sb.Meta.Name)
	if shoal.KindOf(err) == shoal.KindNotFound || (err == nil && (cur.Meta.Uid != sb.Meta.Uid || cur.Meta.DeletionTimestamp != nil)) {
		return a.cfg.Runtime.RemoveContainer(ctx, id)
	}
	if err != nil {
		return err
	}
	return a.syncEgress(ctx, cur, id, state)
}

// containerEnv is environment, checked: an error that the sandbox's
// records and providers cause (not the store's) comes with the reason a
// condition gives it, and says what to do.
func (a *Agent) containerEnv(ctx context.Context, sb *shoalv1.Sandbox) (env, secrets []string, reason string, err error) {
	env, secrets, err = a.environment(ctx, sb)
	if err != nil {
		reason = "ProviderUnavailable"
		var clash *credentialClash
		if errors.As(err, &clash) {
			reason = "CredentialClash"
		}
		return nil, nil, reason, err
	}
	if n := shoal.EnvBytes(env); n > shoal.MaxContainerEnvBytes {
		// The kernel would refuse to start the process; say why here.
		return nil, nil, "EnvironmentTooLarge", fmt.Errorf("the container's environment is %d bytes (spec.env plus the credentials of its providers); at most %d fit: detach a provider or shrink env, then create the sandbox again",
			n, shoal.MaxContainerEnvBytes)
	}
	return env, secrets, "", nil
}

// environment is the container's env: the sandbox's spec.env, then each
// provider's credentials (credentials win on a clash: a sandbox cannot
// shadow the secret it was attached to). Two providers that give the same
// credential are an error naming both (the API refuses that at create,
// attach and provider update; this catches a race between them). secrets
// are the credential values, which must never reach an error or a status
// message.
func (a *Agent) environment(ctx context.Context, sb *shoalv1.Sandbox) (env, secrets []string, err error) {
	vars := map[string]string{}
	for k, v := range sb.GetSpec().GetEnv() {
		vars[k] = v
	}
	from := map[string]string{}
	for _, p := range sb.GetSpec().GetProviders() {
		prov, err := a.cfg.Store.GetProvider(ctx, sb.Meta.Workspace, p)
		if err != nil {
			return nil, nil, fmt.Errorf("provider %q: %w", p, err)
		}
		creds, err := a.cfg.Store.OpenCredentials(prov)
		if err != nil {
			return nil, nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(creds)) {
			if o, ok := from[k]; ok {
				return nil, nil, &credentialClash{key: k, providers: [2]string{o, p}}
			}
			from[k] = p
			vars[k] = creds[k]
			secrets = append(secrets, creds[k])
		}
	}
	// The mark of an exec is the runtime's alone: a container that
	// carried it would pass it to every exec run by hand (docker exec).
	delete(vars, shoal.ExecEnv)
	vars["SHOAL_SANDBOX"] = sb.Meta.Name
	vars["SHOAL_WORKSPACE"] = sb.Meta.Workspace
	env = make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, secrets, nil
}

// credentialClash: two providers of a sandbox give the same credential.
type credentialClash struct {
	key       string
	providers [2]string
}

func (e *credentialClash) Error() string {
	return fmt.Sprintf("providers %q and %q both give credential %q, and a container holds one value per name; remove it from one of them, or detach one, then create the sandbox again",
		e.providers[0], e.providers[1], e.key)
}

func (a *Agent) syncStatus(ctx context.Context, sb *shoalv1.Sandbox) error {
	id := sb.Status.GetContainerId()
	if id == "" {
		return nil
	}
	st, err := a.cfg.Runtime.Inspect(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case !wantStopped(sb) && a.stopInFlight(sb.Meta.Uid):
		// A start during a stop: it waits for the stop to end (which
		// queues the sandbox), then starts the container again.
		return nil
	case wantStopped(sb) && st.Running:
		return a.stopContainer(ctx, sb, id)
	case !wantStopped(sb) && runStatePending(sb) && st.Exists && !st.Running:
		return a.startContainer(ctx, sb, id)
	}
	gen := sb.GetSpec().GetRunGeneration()
	if err := a.syncCredentialFiles(ctx, sb, id, st); err != nil {
		a.log.Warn("credential files not written; will retry", "sandbox", sb.Meta.Name, "err", err)
	}
	if err := a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		observe(s, id, st)
		observeRunState(s, sb, gen, st)
		if s.Phase == shoalv1.SandboxPhase_STOPPED && !wantStopped(sb) {
			if by, since := a.stoppedByOutage(st); by {
				s.Message = fmt.Sprintf("container stopped with code %d when its engine went down or restarted (it last answered at %s), not necessarily by its command: start it again with `shoal sandbox start`",
					st.ExitCode, since.UTC().Format(time.RFC3339))
				store.SetCondition(s, "ContainerPresent", "True", "StoppedByEngine", s.Message)
				store.SetCondition(s, ConditionStopped, "True", "StoppedByEngine", s.Message)
			}
		}
	}); err != nil {
		return err
	}
	return a.syncEgress(ctx, sb, id, st)
}

// observe sets the phase that the container's state means.
func observe(s *shoalv1.SandboxStatus, id string, st shoal.ContainerState) {
	engineBack(s) // the engine answered: the state below is its word
	switch {
	case !st.Exists:
		s.Phase = shoalv1.SandboxPhase_ERROR
		s.Message = fmt.Sprintf("container %s was removed outside shoal; delete the sandbox and create it again", id[:min(12, len(id))])
		store.SetCondition(s, "ContainerPresent", "False", "RemovedExternally", s.Message)
	case st.Paused:
		// Docker counts a paused container as running, but nothing runs
		// in it and exec fails: READY would lie.
		s.Phase = shoalv1.SandboxPhase_PAUSED
		s.Message = "container is paused (docker pause); exec fails until it is unpaused (docker unpause)"
		store.SetCondition(s, "ContainerPresent", "True", "Paused", s.Message)
	case st.Running:
		s.Phase = shoalv1.SandboxPhase_READY
		s.Message = ""
		store.SetCondition(s, "ContainerPresent", "True", "Running", "")
	case st.Error != "":
		// Docker could not start the process (exit code 128 says only
		// that); its own reason says why.
		s.Phase = shoalv1.SandboxPhase_ERROR
		s.ExitCode = int32(st.ExitCode)
		s.Message = "Docker could not start the container: " + st.Error
		store.SetCondition(s, "ContainerPresent", "True", "StartFailed", s.Message)
	case st.OOM:
		s.Phase = shoalv1.SandboxPhase_ERROR
		s.ExitCode = int32(st.ExitCode)
		s.Message = "container was killed: out of memory"
		store.SetCondition(s, "ContainerPresent", "True", "OOMKilled", s.Message)
	default:
		s.Phase = shoalv1.SandboxPhase_STOPPED
		s.ExitCode = int32(st.ExitCode)
		s.Message = fmt.Sprintf("container exited with code %d", st.ExitCode)
		store.SetCondition(s, "ContainerPresent", "True", "Exited", s.Message)
	}
}

// MaxMessageBytes bounds status.message and every condition message the
// agent writes. Docker's error text has no bound of its own, and a
// status is part of the sandbox's size budget in etcd.
const MaxMessageBytes = 1024

// setStatus applies a status change through the update loop, unless the
// sandbox was replaced or is being deleted meanwhile.
func (a *Agent) setStatus(ctx context.Context, seen *shoalv1.Sandbox, f func(*shoalv1.SandboxStatus)) error {
	var prev before // what f changed, for its events (events.go)
	var applied bool
	updated, err := a.cfg.Store.UpdateSandbox(ctx, seen.Meta.Workspace, seen.Meta.Name, store.Preconditions{UID: seen.Meta.Uid},
		func(sb *shoalv1.Sandbox) error {
			applied = false
			if sb.Meta.DeletionTimestamp != nil {
				return nil
			}
			if sb.Status == nil {
				sb.Status = &shoalv1.SandboxStatus{}
			}
			prev, applied = beforeOf(sb.Status), true
			f(sb.Status)
			// Observed: this node's agent reports on the container, so the
			// node is not lost (any more).
			sb.Status.Node = a.cfg.Node
			for _, c := range sb.Status.Conditions {
				if c.Type == store.ConditionNodeLost && c.Status == "True" {
					store.SetCondition(sb.Status, store.ConditionNodeLost, "False", "NodeReady", "")
				}
			}
			sb.Status.Message = events.Truncate(sb.Status.Message, MaxMessageBytes)
			for _, c := range sb.Status.Conditions {
				c.Message = events.Truncate(c.Message, MaxMessageBytes)
			}
			return nil
		})
	if err == nil && applied {
		a.transition(updated, prev)
	}
	return ignoreGone(err)
}

// ignoreGone drops the errors of a status write to a sandbox that is gone,
// was replaced or is being deleted: teardown owns it now.
func ignoreGone(err error) error {
	switch shoal.KindOf(err) {
	case shoal.KindNotFound, shoal.KindConflict, shoal.KindFailedPrecondition:
		return nil
	}
	return err
}
