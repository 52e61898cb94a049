package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/lease"
	"shoal/store"
	"shoal/workqueue"
)

// Elector runs a function for each term of leadership.
type Elector interface {
	Run(ctx context.Context, lead func(ctx context.Context, l *lease.Leadership) error) error
}

var _ Elector = (*lease.Elector)(nil)

// Config of a Coordinator.
type Config struct {
	Store   *store.Store
	Elector Elector
	// FenceMargin is how long after a node's loss is recorded its
	// sandboxes' deletions may complete without the node (store/deletion.go:
	// ownerProof). It must exceed the time a cut-off node takes to freeze
	// its containers after its lease expired; the default is one node TTL.
	FenceMargin time.Duration
	// Workers tear sandboxes down in parallel.
	Workers int
	// Resync lists all DELETING sandboxes and terminating providers this
	// often, in case a watch event was missed.
	Resync time.Duration
	// Events, if set, records the Fenced event of each sandbox of a lost
	// node once its fence time has passed (fenced.go).
	Events Events
	Logger *slog.Logger
	Tracer trace.Tracer
}

// DefaultFenceMargin is Config.FenceMargin's default: the default node TTL.
const DefaultFenceMargin = 10 * time.Second

// Coordinator drives teardown while this node leads.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	fenced fencedNodes // this term's Fenced events (fenced.go)
}

// New validates cfg and returns a Coordinator.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil || cfg.Elector == nil {
		return nil, errors.New("coordinator: store and elector are required")
	}
	if cfg.FenceMargin <= 0 {
		cfg.FenceMargin = DefaultFenceMargin
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("shoal/coordinator")
	}
	return &Coordinator{cfg: cfg, log: cfg.Logger.With("subsystem", "coordinator")}, nil
}

// Start campaigns for leadership and runs the loops during each term. It
// blocks until ctx ends.
func (c *Coordinator) Start(ctx context.Context) error {
	err := c.cfg.Elector.Run(ctx, c.lead)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// kind is what a task does.
type kind int

const (
	// removeSandbox removes a DELETING sandbox once its owner's proof is
	// in (store.RemoveSandbox), then finalises the providers it released.
	removeSandbox kind = iota
	// finalizeProvider deletes a terminating provider once no sandbox
	// holds it (store.FinalizeProvider).
	finalizeProvider
	// nodeLost records a node's loss and gives its sandboxes phase
	// UNKNOWN (store.MarkNodeLost, store.MarkSandboxesUnknown).
	nodeLost
	// forgetNode forgets a node `shoal node remove` named once no sandbox
	// names it (store.CompleteForget).
	forgetNode
	// repair completes stale deletion intents and collects keys no
	// sandbox holds (store/repair.go).
	repair
)

func (k kind) String() string {
	switch k {
	case removeSandbox:
		return "remove-sandbox"
	case finalizeProvider:
		return "finalize-provider"
	case nodeLost:
		return "node-lost"
	case forgetNode:
		return "forget-node"
	case repair:
		return "repair"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// task is one item of leader work. ws and name name the sandbox or
// provider (ws empty and name the node for the node kinds); uid is the
// sandbox's, for removeSandbox.
type task struct {
	kind          kind
	ws, name, uid string
}

// key identifies a task in the queue: one of each at a time.
func (t task) key() string {
	switch t.kind {
	case repair:
		return "r"
	case finalizeProvider:
		return "p/" + t.ws + "/" + t.name
	case nodeLost:
		return "n/" + t.name
	case forgetNode:
		return "f/" + t.name
	}
	return "s/" + t.ws + "/" + t.name + "/" + t.uid
}

// taskTimeout bounds one teardown step.
const taskTimeout = time.Minute

// lead runs one term. It returns when ctx ends (lease lost or shutdown).
func (c *Coordinator) lead(ctx context.Context, l *lease.Leadership) error {
	var fence store.Fence = l // the term's token: every write below compares it
	c.fenced.reset()
	q := workqueue.New(task.key)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, c.cfg.Workers, func(t task) time.Duration {
			// Bounded: a step whose etcd call hangs is tried again
			// rather than holding its task for the rest of the term.
			tctx, tcancel := context.WithTimeout(ctx, taskTimeout)
			defer tcancel()
			after, err := c.process(tctx, fence, q, t)
			switch {
			case err == nil:
				return after
			case errors.Is(err, store.ErrFenced):
				c.log.Warn("fenced out; stopping leader loops", "err", err)
				cancel()
				return 0
			case ctx.Err() == nil:
				c.log.Warn("leader step failed; will retry", "task", t.kind, "key", t.key(), "err", err)
			}
			return time.Second
		})
	}()

	// Each watch has a context of its own under ctx: a broken one is
	// stopped (its goroutine waited for) before it is opened again, and
	// the term waits for the open ones as it ends.
	openSandboxes := func() *store.Watch[store.Event[*shoalv1.Sandbox]] {
		return watchUnder(ctx, func(ctx context.Context) <-chan store.Event[*shoalv1.Sandbox] {
			return c.cfg.Store.WatchSandboxes(ctx, "", "", 0)
		})
	}
	openProviders := func() *store.Watch[store.Event[*shoalv1.Provider]] {
		return watchUnder(ctx, func(ctx context.Context) <-chan store.Event[*shoalv1.Provider] {
			return c.cfg.Store.WatchProviders(ctx, 0)
		})
	}
	sandboxes, providers := openSandboxes(), openProviders()
	nodes := watchUnder(ctx, c.cfg.Store.WatchNodeKeys)
	teardowns := watchUnder(ctx, c.cfg.Store.WatchTeardowns)
	defer func() {
		for _, stop := range []func(){sandboxes.Stop, providers.Stop, nodes.Stop, teardowns.Stop} {
			stop()
		}
	}()
	// Nodes lost while no leader watched are found by the first resync;
	// once one has listed everything pending and queued it, the term
	// says so (a resync whose lists failed is not one).
	synced := false
	markSynced := func(ok bool) {
		if !ok || synced {
			return
		}
		if err := l.MarkSynced(ctx); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("could not record the first resync", "err", err)
			}
			return
		}
		synced = true
	}
	markSynced(c.resync(ctx, q))
	tick := time.NewTicker(c.cfg.Resync)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-nodes.C:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("node watch broke; restarting it", "err", ev.Err)
				nodes.Stop()
				nodes = watchUnder(ctx, c.cfg.Store.WatchNodeKeys)
				c.resync(ctx, q)
				continue
			}
			if ev.Deleted {
				q.Add(task{kind: nodeLost, name: ev.Name})
			}
		case ev, ok := <-teardowns.C:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("teardown watch broke; restarting it", "err", ev.Err)
				teardowns.Stop()
				teardowns = watchUnder(ctx, c.cfg.Store.WatchTeardowns)
				c.resync(ctx, q)
				continue
			}
			if !ev.Deleted {
				ws, name := store.TeardownName(ev.Name)
				q.Add(task{kind: removeSandbox, ws: ws, name: name, uid: ev.Value})
			}
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sandboxes.C:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("sandbox watch broke; restarting it", "err", ev.Err)
				sandboxes.Stop()
				sandboxes = openSandboxes()
				continue
			}
			if sb := ev.Object; ev.Type != shoalv1.EventType_DELETED && sb.GetMeta().GetDeletionTimestamp() != nil {
				q.Add(sandboxTask(sb))
			}
		case ev, ok := <-providers.C:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("provider watch broke; restarting it", "err", ev.Err)
				providers.Stop()
				providers = openProviders()
				continue
			}
			if p := ev.Object; ev.Type != shoalv1.EventType_DELETED && p.GetMeta().GetDeletionTimestamp() != nil {
				q.Add(providerTask(p))
			}
		case <-tick.C:
			markSynced(c.resync(ctx, q))
		}
	}
}

// watchUnder opens a watch under a context of its own, a child of ctx,
// that its Stop ends.
func watchUnder[E any](ctx context.Context, open func(context.Context) <-chan E) *store.Watch[E] {
	wctx, cancel := context.WithCancel(ctx)
	return store.NewWatch(cancel, open(wctx))
}

func sandboxTask(sb *shoalv1.Sandbox) task {
	return task{kind: removeSandbox, ws: sb.Meta.Workspace, name: sb.Meta.Name, uid: sb.Meta.Uid}
}

func providerTask(p *shoalv1.Provider) task {
	return task{kind: finalizeProvider, ws: p.Meta.Workspace, name: p.Meta.Name}
}

// resync queues all pending work: stale intents and stray keys first (as
// one task), then every DELETING sandbox, terminating provider, NotReady
// node and node being forgotten. It reports whether every list succeeded.
func (c *Coordinator) resync(ctx context.Context, q *workqueue.Queue[task]) bool {
	ok := true
	q.Add(task{kind: repair})
	page, err := c.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return sb.GetMeta().GetDeletionTimestamp() != nil
	})
	if err != nil {
		c.log.Warn("resync: list sandboxes", "err", err)
		ok = false
	}
	for _, sb := range page.Items {
		q.Add(sandboxTask(sb))
	}
	pp, err := c.cfg.Store.ListProviders(ctx, "", store.ListOptions{}, func(p *shoalv1.Provider) bool {
		return p.GetMeta().GetDeletionTimestamp() != nil
	})
	if err != nil {
		c.log.Warn("resync: list providers", "err", err)
		ok = false
	}
	for _, p := range pp.Items {
		q.Add(providerTask(p))
	}
	nodes, err := c.cfg.Store.Nodes(ctx)
	if err != nil {
		c.log.Warn("resync: list nodes", "err", err)
		ok = false
	}
	for _, n := range nodes {
		if !n.GetStatus().GetReady() {
			q.Add(task{kind: nodeLost, name: n.Name})
		}
	}
	forget, err := c.cfg.Store.Forgetting(ctx)
	if err != nil {
		c.log.Warn("resync: list nodes being removed", "err", err)
		ok = false
	}
	for _, id := range forget {
		q.Add(task{kind: forgetNode, name: id})
	}
	return ok
}

// repairStale rolls forward deletions whose deleter died between intent and
// mark, removes intents that match no record, and collects keys no sandbox
// holds.
func (c *Coordinator) repairStale(ctx context.Context, fence store.Fence) error {
	// Roll forward deletions whose deleter died between intent and mark;
	// remove intents that match no record.
	intents, err := c.cfg.Store.Intents(ctx)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("repair: list deletion intents", "err", err)
	}
	for _, p := range intents {
		if _, err := c.cfg.Store.CompleteIntent(ctx, p.Workspace, p.Sandbox, p.UID, fence); err != nil && ctx.Err() == nil {
			if errors.Is(err, store.ErrFenced) {
				return err
			}
			c.log.Warn("repair: complete deletion intent", "sandbox", p.Sandbox, "err", err)
		}
	}
	// Attachment keys of sandboxes that do not exist would block their
	// providers' deletion forever.
	if _, err := c.cfg.Store.CollectAttachments(ctx, fence); err != nil && ctx.Err() == nil {
		if errors.Is(err, store.ErrFenced) {
			return err
		}
		c.log.Warn("repair: collect stray attachment keys", "err", err)
	}
	// Past its time bound (not the term's end), the pass is incomplete:
	// say so, so that it is tried again.
	return ctx.Err()
}

// process runs one task. It returns how long to wait before the task is
// tried again (0: done, or woken by a watch event).
func (c *Coordinator) process(ctx context.Context, fence store.Fence, q *workqueue.Queue[task], t task) (time.Duration, error) {
	switch t.kind {
	case repair:
		return 0, c.repairStale(ctx, fence)
	case finalizeProvider:
		ctx, span := c.cfg.Tracer.Start(ctx, "coordinator.FinalizeProvider")
		defer span.End()
		gone, rev, err := c.cfg.Store.FinalizeProvider(ctx, t.ws, t.name, fence)
		if gone {
			c.fencedWrite("provider finalized", t.ws, t.name, fence, rev)
		}
		return 0, err
	case nodeLost:
		return c.markNodeLost(ctx, fence, t.name)
	case forgetNode:
		gone, left, err := c.cfg.Store.CompleteForget(ctx, t.name, fence)
		if err == nil && !gone && left > 0 {
			c.log.Info("node removal waits for its sandboxes' deletion", "node", t.name, "sandboxes", left)
		}
		return 0, err
	case removeSandbox:
		return c.teardown(ctx, fence, q, t)
	}
	return 0, fmt.Errorf("coordinator: unknown task %v", t.kind)
}

// teardown is step 3 of the deletion protocol (store/deletion.go): once
// the owner removed the container, or its node is fenced, remove the
// record and its keys in one fenced Txn, then finalise the providers it
// released.
func (c *Coordinator) teardown(ctx context.Context, fence store.Fence, q *workqueue.Queue[task], t task) (time.Duration, error) {
	ctx, span := c.cfg.Tracer.Start(ctx, "coordinator.Teardown")
	defer span.End()
	sb, err := c.cfg.Store.GetSandbox(ctx, t.ws, t.name)
	switch shoal.KindOf(err) {
	case shoal.KindNotFound, shoal.KindDataLoss:
		return 0, nil // gone; a corrupt record is removed by its deletion call
	}
	if err != nil {
		return 0, err
	}
	if sb.Meta.Uid != t.uid || sb.Meta.DeletionTimestamp == nil {
		return 0, nil
	}
	rev, err := c.cfg.Store.RemoveSandbox(ctx, t.ws, t.name, t.uid, fence, c.cfg.FenceMargin)
	var pending *store.OwnerPending
	switch {
	case errors.As(err, &pending) && !pending.Lost:
		return 0, nil // the owner's teardown record wakes this task
	case errors.As(err, &pending) && pending.Wait > 0:
		return pending.Wait, nil
	case errors.As(err, &pending):
		q.Add(task{kind: nodeLost, name: pending.Node}) // record the loss first
		return time.Second, nil
	case shoal.KindOf(err) == shoal.KindFailedPrecondition:
		return 0, nil // not marked for deletion (cannot happen for a uid we saw DELETING)
	case err != nil:
		return 0, err
	}
	if rev != 0 {
		c.fencedWrite("sandbox removed", t.ws, t.name, fence, rev)
	}
	// The providers it released may now be finalisable.
	for _, p := range sb.GetSpec().GetProviders() {
		gone, rev, err := c.cfg.Store.FinalizeProvider(ctx, t.ws, p, fence)
		if err != nil && shoal.KindOf(err) != shoal.KindNotFound {
			return 0, err
		}
		if gone {
			c.fencedWrite("provider finalized", t.ws, p, fence, rev)
		}
	}
	return 0, nil
}

// markNodeLost acts on a node whose registry key is gone: it records the loss
// (once) and gives its sandboxes phase UNKNOWN. Nothing is rescheduled:
// sandboxes hold local state. Until the node's fence time it returns what
// is left of it, so that the task runs again then and records that the
// node is fenced (fenced.go).
func (c *Coordinator) markNodeLost(ctx context.Context, fence store.Fence, id string) (time.Duration, error) {
	since, err := c.cfg.Store.MarkNodeLost(ctx, id, fence)
	if err != nil || since.IsZero() {
		return 0, err
	}
	n, err := c.cfg.Store.MarkSandboxesUnknown(ctx, id, since, fence)
	if n > 0 {
		c.log.Warn("node lost: its sandboxes are UNKNOWN until it is back", "node", id, "sandboxes", n, "since", since)
	}
	if err != nil {
		return 0, err
	}
	return c.recordFenced(ctx, id, since)
}

// fencedWrite logs an applied leader-only write. (The store logs every
// fenced write with its fencing token and commit revision, for the chaos
// suite's check; this line says what it meant.)
func (c *Coordinator) fencedWrite(what, ws, name string, fence store.Fence, rev int64) {
	c.log.Info(what, "workspace", ws, "sandbox_or_provider", name, "fence_rev", fence.Rev(), "commit_rev", rev)
}
