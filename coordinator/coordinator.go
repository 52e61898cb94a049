package coordinator

import (
	"context"
	"errors"
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

// Runtime is what teardown needs of the container runtime.
type Runtime interface {
	// Remove removes every container of a sandbox uid; gone is success.
	Remove(ctx context.Context, uid string) error
}

// Elector runs a function for each term of leadership.
type Elector interface {
	Run(ctx context.Context, lead func(ctx context.Context, l *lease.Leadership) error) error
}

var _ Elector = (*lease.Elector)(nil)

// Config of a Coordinator.
type Config struct {
	Store   *store.Store
	Runtime Runtime
	Elector Elector
	// Workers tear sandboxes down in parallel.
	Workers int
	// Resync lists all DELETING sandboxes and terminating providers this
	// often, in case a watch event was missed.
	Resync time.Duration
	Logger *slog.Logger
	Tracer trace.Tracer
}

// Coordinator drives teardown while this node leads.
type Coordinator struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg and returns a Coordinator.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil || cfg.Runtime == nil || cfg.Elector == nil {
		return nil, errors.New("coordinator: store, runtime and elector are required")
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

type task struct {
	ws, name, uid string
	providers     []string
	provider      bool // finalise provider ws/name
}

func (t task) key() string {
	if t.provider {
		return "p/" + t.ws + "/" + t.name
	}
	return "s/" + t.ws + "/" + t.name + "/" + t.uid
}

// lead runs one term. It returns when ctx ends (lease lost or shutdown).
func (c *Coordinator) lead(ctx context.Context, l *lease.Leadership) error {
	fence := l.Fence()
	q := workqueue.New(task.key)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, c.cfg.Workers, func(t task) time.Duration {
			err := c.process(ctx, fence, t)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, store.ErrFenced):
				c.log.Warn("fenced out; stopping leader loops", "err", err)
				cancel()
				return 0
			case ctx.Err() == nil:
				c.log.Warn("teardown step failed; will retry", "task", t.key(), "err", err)
			}
			return time.Second
		})
	}()

	sandboxes := c.cfg.Store.WatchSandboxes(ctx, "", "", 0)
	providers := c.cfg.Store.WatchProviders(ctx, 0)
	tick := time.NewTicker(c.cfg.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sandboxes:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("sandbox watch broke; restarting it", "err", ev.Err)
				sandboxes = c.cfg.Store.WatchSandboxes(ctx, "", "", 0)
				continue
			}
			if sb := ev.Object; ev.Type != shoalv1.EventType_DELETED && sb.GetMeta().GetDeletionTimestamp() != nil {
				q.Add(sandboxTask(sb))
			}
		case ev, ok := <-providers:
			if !ok || ev.Err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("provider watch broke; restarting it", "err", ev.Err)
				providers = c.cfg.Store.WatchProviders(ctx, 0)
				continue
			}
			if p := ev.Object; ev.Type != shoalv1.EventType_DELETED && p.GetMeta().GetDeletionTimestamp() != nil {
				q.Add(task{ws: p.Meta.Workspace, name: p.Meta.Name, provider: true})
			}
		case <-tick.C:
			c.resync(ctx, fence, q)
		}
	}
}

func sandboxTask(sb *shoalv1.Sandbox) task {
	return task{ws: sb.Meta.Workspace, name: sb.Meta.Name, uid: sb.Meta.Uid, providers: sb.GetSpec().GetProviders()}
}

func (c *Coordinator) resync(ctx context.Context, fence *store.Fence, q *workqueue.Queue[task]) {
	// Roll forward deletions whose deleter died between intent and mark;
	// remove intents that match no record.
	intents, err := c.cfg.Store.Intents(ctx)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("resync: list deletion intents", "err", err)
	}
	for _, p := range intents {
		if _, err := c.cfg.Store.CompleteIntent(ctx, p.Workspace, p.Sandbox, p.UID, fence); err != nil && ctx.Err() == nil {
			c.log.Warn("resync: complete deletion intent", "sandbox", p.Sandbox, "err", err)
		}
	}
	// Attachment keys of sandboxes that do not exist would block their
	// providers' deletion forever.
	if _, err := c.cfg.Store.CollectAttachments(ctx, fence); err != nil && ctx.Err() == nil {
		c.log.Warn("resync: collect stray attachment keys", "err", err)
	}
	page, err := c.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return sb.GetMeta().GetDeletionTimestamp() != nil
	})
	if err != nil {
		c.log.Warn("resync: list sandboxes", "err", err)
	}
	for _, sb := range page.Items {
		q.Add(sandboxTask(sb))
	}
	pp, err := c.cfg.Store.ListProviders(ctx, "", store.ListOptions{}, func(p *shoalv1.Provider) bool {
		return p.GetMeta().GetDeletionTimestamp() != nil
	})
	if err != nil {
		c.log.Warn("resync: list providers", "err", err)
	}
	for _, p := range pp.Items {
		q.Add(task{ws: p.Meta.Workspace, name: p.Meta.Name, provider: true})
	}
}

// process runs one step of the deletion protocol (store/deletion.go).
func (c *Coordinator) process(ctx context.Context, fence *store.Fence, t task) error {
	if t.provider {
		ctx, span := c.cfg.Tracer.Start(ctx, "coordinator.FinalizeProvider")
		defer span.End()
		gone, rev, err := c.cfg.Store.FinalizeProvider(ctx, t.ws, t.name, fence)
		if gone {
			c.fencedWrite("provider finalized", t.ws, t.name, fence, rev)
		}
		return err
	}
	ctx, span := c.cfg.Tracer.Start(ctx, "coordinator.Teardown")
	defer span.End()
	// Step 2: the container. Idempotent, so a retry or a new leader may
	// repeat it safely.
	if err := c.cfg.Runtime.Remove(ctx, t.uid); err != nil {
		return err
	}
	// Step 3: record and attachment keys, in one fenced Txn.
	rev, err := c.cfg.Store.RemoveSandbox(ctx, t.ws, t.name, t.uid, fence)
	if err != nil {
		if shoal.KindOf(err) == shoal.KindFailedPrecondition {
			return nil // not marked for deletion (cannot happen for a uid we saw DELETING)
		}
		return err
	}
	if rev != 0 {
		c.fencedWrite("sandbox removed", t.ws, t.name, fence, rev)
	}
	// The providers it released may now be finalisable.
	for _, p := range t.providers {
		gone, rev, err := c.cfg.Store.FinalizeProvider(ctx, t.ws, p, fence)
		if err != nil && shoal.KindOf(err) != shoal.KindNotFound {
			return err
		}
		if gone {
			c.fencedWrite("provider finalized", t.ws, p, fence, rev)
		}
	}
	return nil
}

// fencedWrite logs an applied leader-only write with its fencing token and
// commit revision: the chaos suite checks from these lines that no write of
// a deposed leader was ever applied.
func (c *Coordinator) fencedWrite(what, ws, name string, fence *store.Fence, rev int64) {
	c.log.Info(what, "workspace", ws, "name", name, "fence_key", fence.Key, "fence_rev", fence.Revision, "commit_rev", rev)
}
