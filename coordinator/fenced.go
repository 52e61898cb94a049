package coordinator

import (
	"context"
	"sync"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/store"
)

// Events is what the coordinator needs of package events. Record never
// blocks and never fails.
type Events interface {
	Record(sb *shoalv1.Sandbox, e events.Event)
}

var _ Events = (*events.Recorder)(nil)

// Fenced, in shoal's terms: a node whose lease expired is lost
// (store.MarkNodeLost records when), and once the fence margin has passed
// since then it is fenced. A node that is alive but cut off from etcd
// could not renew its lease either, and has paused every container it
// runs by then (agent/freeze.go); so from its fence time on, deletions of
// its sandboxes complete without it (store/deletion.go: ownerProof), and
// nothing it runs is unobserved and live. That moment is each of its
// sandboxes' Fenced event, recorded here for all of them when the node's
// loss task runs at or after its fence time (and, for a sandbox removed on
// that proof, by the removal: store.RemoveSandbox), at the fence time
// itself and Once: every leader derives it alike, and the first write of
// it stands.

// fencedNodes remembers, for one term, the loss of each node whose
// sandboxes' Fenced events this leader has recorded: the loss task runs
// again on every resync while a node stays lost, and needs to list them
// only once.
type fencedNodes struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func (f *fencedNodes) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since = map[string]time.Time{}
}

// mark reports whether the loss of node at since is new to this term, and
// remembers it.
func (f *fencedNodes) mark(node string, since time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since == nil {
		f.since = map[string]time.Time{}
	}
	if s, ok := f.since[node]; ok && s.Equal(since) {
		return false
	}
	f.since[node] = since
	return true
}

// recordFenced records the Fenced event of every sandbox of node, lost at
// since, once its fence time has passed; before it, it returns how long is
// left.
func (c *Coordinator) recordFenced(ctx context.Context, node string, since time.Time) (time.Duration, error) {
	if c.cfg.Events == nil {
		return 0, nil
	}
	if wait := time.Until(since.Add(c.cfg.FenceMargin)); wait > 0 {
		return wait, nil
	}
	if !c.fenced.mark(node, since) {
		return 0, nil
	}
	page, err := c.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool { return store.NodeOf(sb) == node })
	if err != nil {
		c.fenced.forget(node)
		return 0, err
	}
	ev := store.FencedEvent(node, since, c.cfg.FenceMargin)
	for _, sb := range page.Items {
		c.cfg.Events.Record(sb, ev)
	}
	return 0, nil
}

func (f *fencedNodes) forget(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.since, node)
}
