package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/chaosbreak"
	"shoal/store"
	"shoal/workqueue"
)

// Self-fencing.
//
// A node that cannot renew its liveness lease within its TTL freezes (docker
// pause) every container it runs, and keeps them frozen until it holds a
// lease again. Meanwhile the leader may have found the node lost and, once
// the fence margin passed, completed deletions without it (store/deletion.go);
// so a cut-off host runs sandboxes unobserved for at most its TTL, and a
// sandbox deleted elsewhere never runs its agent, with its credentials, on.
//
// When the node holds a lease again (the same one, after a short cut, or a
// new registration) it rejoins: it removes at once the containers whose
// sandboxes are gone or being deleted, thaws the ones it froze (but kills,
// frozen, those of sandboxes stopped meanwhile: they never run again), and queues
// every sandbox so that status (UNKNOWN while it was lost) is observed again.
// A node process that was stopped (SIGSTOP) and resumed finds its lease
// stale by the clock before anything else: reconcile acts only while the
// lease is held, and the next check freezes.

// fence checks the lease every LeaseCheck until ctx ends. It runs in a
// goroutine of its own (Start waits for it), and it alone reads and writes
// frozen, gen, paused and retryAt.
func (a *Agent) fence(ctx context.Context, q *workqueue.Queue[item]) {
	tick := time.NewTicker(a.cfg.LeaseCheck)
	defer tick.Stop()
	for {
		a.checkLease(ctx, q)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkLease freezes while the lease is not held and rejoins when it is
// held again. While frozen it pauses again, once a second, any container
// that runs: a reconcile that looked at the lease just before it was lost
// may have started one after the freeze.
func (a *Agent) checkLease(ctx context.Context, q *workqueue.Queue[item]) {
	held, gen := a.cfg.Lease.State()
	if time.Now().Before(a.retryAt) {
		return
	}
	switch {
	case !held && chaosbreak.Is("no-freeze"):
		// Broken on purpose (chaos self-test): run on unfenced.
	case !held:
		a.retryAt = time.Now().Add(time.Second)
		if err := a.freeze(ctx); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("freeze: some containers could not be paused; trying again", "err", err)
			}
			return
		}
		a.frozen = true
	case a.frozen || gen != a.gen:
		if err := a.rejoin(ctx, q); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("rejoin failed; trying again", "err", err)
			}
			a.retryAt = time.Now().Add(time.Second)
			return
		}
		a.frozen, a.gen = false, gen
		a.retryAt = time.Time{}
		a.rejoinedOnce.Do(func() { close(a.rejoined) })
	}
}

// freeze pauses every running container of this node, recording them all
// in FrozenFile first. The pauses run side by side (at most pauseWidth at
// once): a host that finds its lease gone has the fence margin, counted
// from the lease's expiry, to freeze everything, and one pause after
// another on a busy engine took longer than that in a chaos run.
func (a *Agent) freeze(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	cs, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		return err
	}
	var run []shoal.Container
	for _, c := range cs {
		if c.State != "running" {
			continue // paused by someone else, or not running: not ours to thaw
		}
		a.paused[c.ID] = true
		run = append(run, c)
	}
	if len(run) > 0 {
		if err := a.saveFrozen(); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var errs []error
	n := 0
	sem := make(chan struct{}, pauseWidth)
	var wg sync.WaitGroup
	for _, c := range run {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := a.cfg.Runtime.Pause(ctx, c.ID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			n++
			a.recordFrozen(c)
		})
	}
	wg.Wait()
	if n > 0 || !a.frozen {
		a.log.Warn("node does not hold its lease: froze its containers until it does", "paused", n)
	}
	return errors.Join(errs...)
}

// pauseWidth bounds the pauses freeze has in flight at once.
const pauseWidth = 16

// rejoin reconciles the containers with the records after the node held no
// lease, or registered anew (which includes its first start): containers of
// sandboxes that are gone, replaced or being deleted go at once, without the
// orphan grace; the ones freeze paused are thawed (first: before any
// removal or stop); every sandbox is queued.
// Containers are listed before records, as in resync.
func (a *Agent) rejoin(ctx context.Context, q *workqueue.Queue[item]) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	cs, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		return err
	}
	page, err := a.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return store.NodeOf(sb) == a.cfg.Node
	})
	if err != nil {
		return err
	}
	if len(page.Warnings) > 0 {
		// A corrupt record may be one of these containers' sandbox: remove
		// nothing on the strength of an incomplete list.
		return shoal.DataLoss("sandbox list incomplete: %s", strings.Join(page.Warnings, "; "))
	}
	live, known := map[string]bool{}, map[string]bool{}
	stopped := map[string]bool{} // meant to be stopped: never thawed
	for _, sb := range page.Items {
		if sb.Meta.DeletionTimestamp == nil {
			live[sb.Meta.Uid] = true
			stopped[sb.Meta.Uid] = wantStopped(sb)
		}
		known[sb.Meta.Uid] = true
		q.Add(item{sb.Meta.Workspace, sb.Meta.Name})
	}
	// Two passes: first the frozen containers of live sandboxes are thawed,
	// then the rest are stopped or removed. A removal can be slow or hang
	// (a force-remove of a frozen container on a busy engine); sandboxes
	// that are meant to run must not stay frozen behind it (a chaos
	// partition left a node's live sandboxes frozen that way).
	removed, thawed := 0, 0
	var errs []error
	var rest []shoal.Container
	for _, c := range cs {
		if !live[c.UID] || !a.paused[c.ID] || stopped[c.UID] {
			rest = append(rest, c)
			continue
		}
		if err := a.cfg.Runtime.Unpause(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		thawed++
		a.recordThawed(c)
		delete(a.paused, c.ID)
	}
	for _, c := range rest {
		switch {
		case !live[c.UID]:
			// (A frozen one is thawed by RemoveContainer first: its
			// egress goes before, so that the thaw opens nothing. Its
			// sidecar too: RemoveContainer takes only the container, and
			// a sandbox that is gone has no teardown to take it.)
			if err := a.stopEgress(ctx, c.UID); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := a.cfg.Runtime.RemoveContainer(ctx, c.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
			if !known[c.UID] {
				a.recordGoneOnRejoin(c) // (a DELETING one's teardown records its own)
			}
		case a.paused[c.ID]:
			// Stopped while the node was cut off: stopped at once with
			// no grace (the runtime thaws it first: a frozen process
			// takes no signal; it runs only until the kill, before the
			// stop is acknowledged).
			if err := a.cfg.Runtime.Stop(ctx, c.ID, 0); err != nil {
				errs = append(errs, err)
				continue
			}
			thawed++
		}
		delete(a.paused, c.ID)
	}
	if err := errors.Join(errs...); err != nil {
		_ = a.saveFrozen()
		return err
	}
	clear(a.paused) // the rest are gone
	if err := a.saveFrozen(); err != nil {
		return err
	}
	if removed+thawed > 0 || a.frozen {
		a.log.Info("node holds its lease: reconciled its containers", "removed", removed, "thawed", thawed)
	}
	return nil
}

// loadFrozen reads FrozenFile, which an earlier process may have left; a
// missing file is an empty set.
func loadFrozen(path string) map[string]bool {
	out := map[string]bool{}
	if path == "" {
		return out
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, id := range strings.Fields(string(b)) {
		out[id] = true
	}
	return out
}

// saveFrozen replaces FrozenFile with the frozen set, atomically (an empty
// set removes it).
func (a *Agent) saveFrozen() error {
	ids := a.paused
	if a.cfg.FrozenFile == "" {
		return nil
	}
	if len(ids) == 0 {
		if err := os.Remove(a.cfg.FrozenFile); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	var b strings.Builder
	for id := range ids {
		b.WriteString(id)
		b.WriteByte('\n')
	}
	tmp := filepath.Join(filepath.Dir(a.cfg.FrozenFile), "."+filepath.Base(a.cfg.FrozenFile)+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, a.cfg.FrozenFile)
}

// FreezeUnregistered is the fence of a node process that cannot register
// (it was restarted while cut off from etcd): its agent never starts, yet
// the containers of its earlier run go on, and the cluster counts the node
// lost and completes deletions of its sandboxes after the fence margin.
// The node calls it once its TTL has passed since it started without
// registering: every running container of the node is paused and recorded
// in frozenFile, which the agent reads when it starts, so that it thaws
// them when the node joins (or removes them if their sandboxes were
// deleted meanwhile). It returns how many containers are frozen.
func FreezeUnregistered(ctx context.Context, node string, rt Runtime, frozenFile string, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: Config{Node: node, Runtime: rt, FrozenFile: frozenFile}, log: log.With("subsystem", "agent", "node", node),
		paused: loadFrozen(frozenFile)}
	err := a.freeze(ctx)
	return len(a.paused), err
}
