package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/store"
	"shoal/workqueue"
)

// Runtime is what the agent needs of the container runtime.
type Runtime interface {
	Run(ctx context.Context, s docker.Spec) (string, error)
	RemoveContainer(ctx context.Context, id string) error
	List(ctx context.Context) ([]docker.Container, error)
	Inspect(ctx context.Context, id string) (docker.State, error)
	Events(ctx context.Context) (<-chan docker.Event, <-chan error)
}

var _ Runtime = (*docker.Runtime)(nil)

// Config of an Agent.
type Config struct {
	Node    string
	Store   *store.Store
	Runtime Runtime
	// Workers provision and sync sandboxes in parallel.
	Workers int
	// Resync compares every sandbox of this node with its container this
	// often, and looks for orphans.
	Resync time.Duration
	// OrphanGrace is how long a container must be seen without a record
	// before it is reaped.
	OrphanGrace time.Duration
	Logger      *slog.Logger
	Tracer      trace.Tracer
}

// Agent is the node-local reconciler.
type Agent struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	orphans  map[string]time.Time // container id → first seen orphaned
	reaped   int
	attempts map[string]int // sandbox uid → failed provisioning attempts
}

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
	if cfg.Node == "" || cfg.Store == nil || cfg.Runtime == nil {
		return nil, errors.New("agent: node, store and runtime are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("shoal/agent")
	}
	return &Agent{cfg: cfg, log: cfg.Logger.With("subsystem", "agent", "node", cfg.Node), orphans: map[string]time.Time{}, attempts: map[string]int{}}, nil
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := workqueue.New(item.key)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, a.cfg.Workers, func(it item) time.Duration {
			if err := a.reconcile(ctx, it); err != nil && ctx.Err() == nil {
				a.log.Warn("reconcile failed; will retry", "sandbox", it.key(), "err", err)
				return time.Second
			}
			return 0
		})
	}()

	sandboxes := a.cfg.Store.WatchSandboxes(ctx, "", "", 0)
	devents, derrs := a.cfg.Runtime.Events(ctx)
	byUID := map[string]item{} // container uid label → sandbox, for events
	tick := time.NewTicker(a.cfg.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sandboxes:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return nil
				}
				a.log.Warn("sandbox watch broke; restarting it", "err", ev.Err)
				sandboxes = a.cfg.Store.WatchSandboxes(ctx, "", "", 0)
				continue
			}
			sb := ev.Object
			if sb.GetStatus().GetNode() != a.cfg.Node {
				continue
			}
			it := item{sb.Meta.Workspace, sb.Meta.Name}
			if ev.Type == shoalv1.EventType_DELETED {
				delete(byUID, sb.Meta.Uid)
				continue
			}
			byUID[sb.Meta.Uid] = it
			if sb.Meta.DeletionTimestamp == nil && sb.Status.Phase == shoalv1.SandboxPhase_PROVISIONING {
				q.Add(it)
			}
		case ev, ok := <-devents:
			if !ok {
				devents = nil
				continue
			}
			if it, known := byUID[ev.UID]; known {
				q.Add(it)
			}
		case err, ok := <-derrs:
			if !ok {
				derrs = nil
			}
			if ctx.Err() != nil {
				return nil
			}
			a.log.Warn("docker event stream broke; resubscribing", "err", err)
			devents, derrs = a.cfg.Runtime.Events(ctx)
		case <-tick.C:
			a.resync(ctx, q)
		}
	}
}

// resync queues every sandbox of this node and reaps orphans. Containers
// are listed before records: a container is only created after its record,
// so a container missing from the later record list has no record.
func (a *Agent) resync(ctx context.Context, q *workqueue.Queue[item]) {
	cs, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		a.log.Warn("resync: list containers", "err", err)
		return
	}
	page, err := a.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return sb.GetStatus().GetNode() == a.cfg.Node
	})
	if err != nil {
		a.log.Warn("resync: list sandboxes", "err", err)
		return
	}
	known := map[string]bool{}
	for _, sb := range page.Items {
		known[sb.Meta.Uid] = true
		if sb.Meta.DeletionTimestamp == nil {
			q.Add(item{sb.Meta.Workspace, sb.Meta.Name})
		}
	}
	now := time.Now()
	a.mu.Lock()
	for uid := range a.attempts {
		if !known[uid] {
			delete(a.attempts, uid)
		}
	}
	seen := map[string]bool{}
	var reap []docker.Container
	for _, c := range cs {
		if known[c.UID] {
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
	for _, c := range reap {
		// Re-check the record by name: the lists above are a snapshot.
		if sb, err := a.cfg.Store.GetSandbox(ctx, c.Workspace, c.Name); err == nil && sb.Meta.Uid == c.UID {
			continue
		}
		if err := a.cfg.Runtime.RemoveContainer(ctx, c.ID); err != nil {
			a.log.Warn("reap orphan", "container", c.ID[:12], "err", err)
			continue
		}
		a.log.Info("reaped orphan container", "container", c.ID[:12], "uid", c.UID, "name", c.Name)
		a.mu.Lock()
		delete(a.orphans, c.ID)
		a.reaped++
		a.mu.Unlock()
	}
}

// reconcile brings one sandbox's status in line with its container,
// creating the container first if the sandbox is PROVISIONING.
func (a *Agent) reconcile(ctx context.Context, it item) error {
	sb, err := a.cfg.Store.GetSandbox(ctx, it.ws, it.name)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if sb.Meta.DeletionTimestamp != nil || sb.Status.GetNode() != a.cfg.Node {
		return nil
	}
	if sb.Status.Phase == shoalv1.SandboxPhase_PROVISIONING {
		return a.provision(ctx, sb)
	}
	return a.syncStatus(ctx, sb)
}

func (a *Agent) provision(ctx context.Context, sb *shoalv1.Sandbox) error {
	ctx, span := a.cfg.Tracer.Start(ctx, "agent.Provision")
	defer span.End()
	env, err := a.environment(ctx, sb)
	if err != nil {
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			st.Phase = shoalv1.SandboxPhase_ERROR
			st.Message = err.Error()
			setCondition(st, "Provisioned", "False", "ProviderUnavailable", err.Error())
		})
	}
	spec := sb.GetSpec()
	id, err := a.cfg.Runtime.Run(ctx, docker.Spec{
		UID: sb.Meta.Uid, Name: sb.Meta.Name, Workspace: sb.Meta.Workspace,
		Image: spec.GetImage(), Command: spec.GetCommand(), Env: env,
		CPUMillis: spec.GetResources().GetCpuMillis(), MemoryBytes: spec.GetResources().GetMemoryBytes(),
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A Docker hiccup is retried (the queue backs off); a missing image
		// or repeated failure is reported as ERROR.
		if shoal.KindOf(err) != shoal.KindFailedPrecondition && a.attempt(sb.Meta.Uid) < MaxProvisionAttempts {
			return fmt.Errorf("provision %s: %w", sb.Meta.Name, err)
		}
		msg := fmt.Sprintf("container could not be started: %v", err)
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			st.Phase = shoalv1.SandboxPhase_ERROR
			st.ContainerId = id
			st.Message = msg
			setCondition(st, "Provisioned", "False", "RuntimeError", msg)
		})
	}
	a.mu.Lock()
	delete(a.attempts, sb.Meta.Uid)
	a.mu.Unlock()
	if err := a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
		st.Phase = shoalv1.SandboxPhase_READY
		st.ContainerId = id
		st.Message = ""
		setCondition(st, "Provisioned", "True", "ContainerStarted", "")
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
	return nil
}

// environment is the container's env: the sandbox's spec.env, then each
// provider's credentials (credentials win on a clash: a sandbox cannot
// shadow the secret it was attached to).
func (a *Agent) environment(ctx context.Context, sb *shoalv1.Sandbox) ([]string, error) {
	vars := map[string]string{}
	for k, v := range sb.GetSpec().GetEnv() {
		vars[k] = v
	}
	for _, p := range sb.GetSpec().GetProviders() {
		prov, err := a.cfg.Store.GetProvider(ctx, sb.Meta.Workspace, p)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", p, err)
		}
		for k, v := range prov.Credentials {
			vars[k] = v
		}
	}
	vars["SHOAL_SANDBOX"] = sb.Meta.Name
	vars["SHOAL_WORKSPACE"] = sb.Meta.Workspace
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, nil
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
	return a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		switch {
		case !st.Exists:
			s.Phase = shoalv1.SandboxPhase_ERROR
			s.Message = fmt.Sprintf("container %s was removed outside shoal; delete the sandbox and create it again", id[:min(12, len(id))])
			setCondition(s, "ContainerPresent", "False", "RemovedExternally", s.Message)
		case st.Running:
			s.Phase = shoalv1.SandboxPhase_READY
			s.Message = ""
			setCondition(s, "ContainerPresent", "True", "Running", "")
		case st.OOM:
			s.Phase = shoalv1.SandboxPhase_ERROR
			s.ExitCode = int32(st.ExitCode)
			s.Message = "container was killed: out of memory"
			setCondition(s, "ContainerPresent", "True", "OOMKilled", s.Message)
		default:
			s.Phase = shoalv1.SandboxPhase_STOPPED
			s.ExitCode = int32(st.ExitCode)
			s.Message = fmt.Sprintf("container exited with code %d", st.ExitCode)
			setCondition(s, "ContainerPresent", "True", "Exited", s.Message)
		}
	})
}

// setStatus applies a status change through the update loop, unless the
// sandbox was replaced or is being deleted meanwhile.
func (a *Agent) setStatus(ctx context.Context, seen *shoalv1.Sandbox, f func(*shoalv1.SandboxStatus)) error {
	_, err := a.cfg.Store.UpdateSandbox(ctx, seen.Meta.Workspace, seen.Meta.Name, store.Preconditions{UID: seen.Meta.Uid},
		func(sb *shoalv1.Sandbox) error {
			if sb.Meta.DeletionTimestamp != nil {
				return nil
			}
			if sb.Status == nil {
				sb.Status = &shoalv1.SandboxStatus{}
			}
			f(sb.Status)
			return nil
		})
	switch shoal.KindOf(err) {
	case shoal.KindNotFound, shoal.KindConflict, shoal.KindFailedPrecondition:
		return nil // gone, replaced or being deleted: teardown owns it now
	}
	return err
}

// setCondition sets a condition, moving its transition time only when its
// status changes.
func setCondition(st *shoalv1.SandboxStatus, typ, status, reason, msg string) {
	i := slices.IndexFunc(st.Conditions, func(c *shoalv1.Condition) bool { return c.Type == typ })
	if i < 0 {
		st.Conditions = append(st.Conditions, &shoalv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: timestamppb.Now()})
		return
	}
	c := st.Conditions[i]
	if c.Status != status {
		c.LastTransitionTime = timestamppb.Now()
	}
	c.Status, c.Reason, c.Message = status, reason, msg
}
