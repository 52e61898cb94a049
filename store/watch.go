package store

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Event is one change to an object. A terminal event carries Err and is
// the last one on its channel.
type Event[T any] struct {
	Type     shoalv1.EventType
	Object   T
	Revision int64
	Err      error

	key string // the record's etcd key (the watch cache filters by it)
}

// A Watch is an open watch that its caller ends: its events arrive on C,
// which closes once the goroutine feeding it has returned. Every Watch
// method of the Store takes a context and closes its channel after that
// context ends; a caller that stops before the channel closes by itself
// (a wait that saw what it waited for) must still wait for that goroutine,
// so that nothing of the watch outlives it. Stop does both.
type Watch[E any] struct {
	C      <-chan E
	cancel context.CancelFunc
}

// NewWatch pairs c, a channel of one of the Store's Watch methods, with
// cancel, which ends the context that watch was opened with.
func NewWatch[E any](cancel context.CancelFunc, c <-chan E) *Watch[E] {
	return &Watch[E]{C: c, cancel: cancel}
}

// Stop ends the watch and returns once its goroutine has: it cancels the
// watch's context, then discards what is still queued until C closes.
func (w *Watch[E]) Stop() {
	w.cancel()
	for range w.C {
	}
}

// WatchSandboxes streams sandbox changes in a workspace ("" for all), or of
// one sandbox when name is set, after revision fromRev. With fromRev 0 the
// current state comes first as ADDED events. The channel closes when ctx
// ends; a compacted fromRev yields a terminal KindGone error, and so does
// one the store has not reached within FutureRevisionWait. Records that
// do not decode are skipped (and logged once); the deletion of one is a
// DELETED event whose object carries only its name and workspace.
func (s *Store) WatchSandboxes(ctx context.Context, ws, name string, fromRev int64) <-chan Event[*shoalv1.Sandbox] {
	key, prefix := s.k.allSandboxes(), true
	switch {
	case name != "":
		key, prefix = s.k.sandbox(ws, name), false
	case ws != "":
		key = s.k.sandboxes(ws)
	}
	return watch(ctx, s, sandboxCodec, key, prefix, fromRev, nil)
}

// WatchNodeSandboxes is WatchSandboxes of every workspace for the
// sandboxes of one node (NodeOf) only: a node's agent needs no others, and
// the events of the rest of the fleet are dropped where they are decoded,
// before they are copied and queued for it (as a kubelet watches its own
// pods only). A sandbox's node is bound once, at placement, so a sandbox
// never leaves the filter mid-stream.
func (s *Store) WatchNodeSandboxes(ctx context.Context, node string, fromRev int64) <-chan Event[*shoalv1.Sandbox] {
	return watch(ctx, s, sandboxCodec, s.k.allSandboxes(), true, fromRev, func(sb *shoalv1.Sandbox) bool { return NodeOf(sb) == node })
}

// SlowWatcherGrace is how long a watch waits for a reader whose buffer is
// full before it ends the watch.
var SlowWatcherGrace = 5 * time.Second

// WatchProviders streams provider changes in all workspaces.
func (s *Store) WatchProviders(ctx context.Context, fromRev int64) <-chan Event[*shoalv1.Provider] {
	return watch(ctx, s, providerCodec, s.k.allProviders(), true, fromRev, nil)
}

// FutureRevisionWait is how long a watch from a revision the store has
// not reached yet waits for it before it ends with KindGone (OUT_OF_RANGE),
// as Kubernetes answers "Too large resource version" after a wait of 3 s.
// Without it such a watch would hang: etcd, and the watch cache, wait for
// that revision for ever, and one from another cluster or a typo never comes.
var FutureRevisionWait = 3 * time.Second

// reached returns once the store has reached rev, or KindGone after
// FutureRevisionWait. A revision the watch cache has applied needs no
// round trip; otherwise etcd's current revision is read (linearizable,
// so a revision any client was given is never ahead of it).
func reached[T object](ctx context.Context, s *Store, k *kindCache[T], rev int64) error {
	if k != nil && k.isListed() && rev <= k.appliedRev() {
		return nil
	}
	deadline := time.Now().Add(FutureRevisionWait)
	pause := 50 * time.Millisecond
	for {
		resp, err := s.c.Get(ctx, s.k.clusterID(), clientv3.WithCountOnly())
		if err != nil {
			return etcdErr(ctx, err)
		}
		cur := resp.Header.Revision
		if rev <= cur {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return shoal.Gone("resource_version %d is ahead of the store (at revision %d after %s): this cluster never gave it out; list again and watch from the list's resource_version", rev, cur, FutureRevisionWait)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctxErr(ctx)
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// watch streams the changes of key (a prefix if prefix) after fromRev;
// keep, if set, drops the events whose object it refuses (it must not
// change or keep what it is given, and reads only what ListSandboxes's keep
// may: for the initial state from the cache it gets an index's view).
// A fromRev the store has not reached ends the
// watch with KindGone after FutureRevisionWait (reached).
func watch[T object](ctx context.Context, s *Store, c codec[T], key string, prefix bool, fromRev int64, keep func(T) bool) <-chan Event[T] {
	if fromRev > 0 {
		if err := reached(ctx, s, kindOf(s, c), fromRev); err != nil {
			out := make(chan Event[T], 1)
			out <- Event[T]{Err: err}
			close(out)
			return out
		}
	}
	if k := kindOf(s, c); k != nil {
		if ch, ok := k.serveWatch(ctx, key, prefix, fromRev, keep); ok {
			return ch
		}
	}
	out := make(chan Event[T], 64)
	go func() {
		defer close(out)
		send := func(e Event[T]) bool {
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if fromRev == 0 {
			opts := []clientv3.OpOption{}
			if prefix {
				opts = append(opts, clientv3.WithPrefix())
			}
			resp, err := s.c.Get(ctx, key, opts...)
			if err != nil {
				send(Event[T]{Err: etcdErr(ctx, err)})
				return
			}
			for _, kv := range resp.Kvs {
				obj, err := c.decode(kv)
				if err != nil {
					s.report(string(kv.Key), kv.ModRevision, err)
					continue
				}
				if keep != nil && !keep(obj) {
					continue
				}
				if !send(Event[T]{Type: shoalv1.EventType_ADDED, Object: obj, Revision: kv.ModRevision}) {
					return
				}
			}
			fromRev = resp.Header.Revision
		}
		opts := []clientv3.OpOption{clientv3.WithRev(fromRev + 1), clientv3.WithPrevKV()}
		if prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		// A consumer that stops reading must not make the etcd client
		// queue events for it without bound: once the buffer is full for
		// SlowWatcherGrace, the watch ends (etcd's first, so nothing more
		// is queued) with an error that says where to resume.
		sendLive := func(e Event[T]) bool {
			sent, slow := sendOrGiveUp(ctx, out, e)
			if slow {
				cancel()
				giveUp(ctx, out, fromRev)
			}
			return sent
		}
		for wr := range s.c.Watch(wctx, key, opts...) {
			if err := wr.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					send(Event[T]{Err: shoal.Gone("resource_version %d is too old (compacted at %d); list again and watch from the list's resource_version", fromRev, wr.CompactRevision)})
				} else {
					send(Event[T]{Err: etcdErr(ctx, err)})
				}
				return
			}
			for _, ev := range wr.Events {
				var e Event[T]
				var err error
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					e.Type = shoalv1.EventType_DELETED
					if ev.PrevKv == nil {
						continue
					}
					if e.Object, err = c.decode(ev.PrevKv); err != nil {
						// A corrupt record was deleted: its watchers
						// still learn that the name is free.
						e.Object, err = c.stub(string(ev.Kv.Key), ev.Kv.ModRevision), nil
					}
					e.Object.GetMeta().ResourceVersion = ev.Kv.ModRevision
				case ev.IsCreate():
					e.Type = shoalv1.EventType_ADDED
					e.Object, err = c.decode(ev.Kv)
				default:
					e.Type = shoalv1.EventType_MODIFIED
					e.Object, err = c.decode(ev.Kv)
				}
				e.Revision = ev.Kv.ModRevision
				if err != nil {
					// Skipped, not fatal: one bad value must not
					// break every watcher of the prefix.
					fromRev = e.Revision
					s.report(string(ev.Kv.Key), ev.Kv.ModRevision, err)
					continue
				}
				if keep != nil && !keep(e.Object) {
					fromRev = e.Revision
					continue
				}
				if !sendLive(e) {
					return
				}
				fromRev = e.Revision
			}
		}
		if ctx.Err() == nil {
			send(Event[T]{Err: shoal.Unavailable("watch ended: etcd lost its leader or closed the stream")})
		}
	}()
	return out
}

// WatchProvider streams changes of one provider after fromRev.
func (s *Store) WatchProvider(ctx context.Context, ws, name string, fromRev int64) <-chan Event[*shoalv1.Provider] {
	return watch(ctx, s, providerCodec, s.k.provider(ws, name), false, fromRev, nil)
}
