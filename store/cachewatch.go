package store

import (
	"context"
	"strings"
	"sync"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Client watches served from the watch cache. Each is a filter (one key or
// a prefix) over the kind's event stream with a queue of its own: the
// cache appends to it without blocking, and a goroutine of the watch
// delivers from it to the reader. A watch from a revision still in the
// event log replays the log from there; one from an older revision is
// served by etcd directly (and may be told that it was compacted). A
// reader that falls maxWatchQueue events behind, or leaves a full channel
// unread for SlowWatcherGrace, has its watch ended with the revision to
// resume from, as with a watch of etcd.

// maxWatchQueue bounds the events queued for one client watch.
const maxWatchQueue = 4096

type cacheWatcher[T object] struct {
	key    string
	prefix bool
	after  int64        // only events with a higher revision
	keep   func(T) bool // if set, only events whose object it keeps

	mu       sync.Mutex
	queue    []Event[T]
	overflow bool
	// dropped is the revision of the first event the full queue could not
	// take: the watch ends, and resumes below it.
	dropped int64
	wake    chan struct{}
	// stopped: the cache stopped (its Start returned); the watch ends.
	stopped bool
}

func (w *cacheWatcher[T]) match(key string) bool {
	if w.prefix {
		return strings.HasPrefix(key, w.key)
	}
	return key == w.key
}

// fanOutLocked queues e for every client watch it matches (k.mu held).
func (k *kindCache[T]) fanOutLocked(e Event[T]) {
	for w := range k.watchers {
		if e.Revision <= w.after || !w.match(e.key) || w.keep != nil && !w.keep(e.Object) {
			continue
		}
		w.mu.Lock()
		if !w.overflow {
			if len(w.queue) >= maxWatchQueue {
				w.overflow, w.dropped = true, e.Revision
			} else {
				w.queue = append(w.queue, e)
			}
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// serveWatch serves a client watch of key (a prefix if prefix) after
// fromRev from the cache, if it can: ok is false when the cache is not
// listed yet or fromRev is older than its event log. keep, if set, filters
// the events by their object.
func (k *kindCache[T]) serveWatch(ctx context.Context, key string, prefix bool, fromRev int64, keep func(T) bool) (<-chan Event[T], bool) {
	if !k.isListed() {
		return nil, false
	}
	out := make(chan Event[T], 64)
	if fromRev == 0 {
		// The current state first: as fresh as a read.
		fresh, err := k.waitFresh(ctx)
		if err != nil {
			out <- Event[T]{Err: err}
			close(out)
			return out, true
		}
		if !fresh {
			return nil, false
		}
	}
	w := &cacheWatcher[T]{key: key, prefix: prefix, keep: keep, wake: make(chan struct{}, 1)}
	var initial []Event[T]
	var current []entry[T] // decoded outside the lock
	v := newView(k.codec)
	var replay []logged // decoded outside the lock
	k.mu.Lock()
	switch {
	case fromRev == 0:
		// Keys are sorted: a prefix's keys are contiguous from the
		// prefix itself, and one key is the first at or after it.
		k.tree.AscendGreaterOrEqual(entry[T]{key: key}, func(e entry[T]) bool {
			if !w.match(e.key) {
				return false
			}
			if e.err == nil && (keep == nil || keep(v.of(&e))) {
				current = append(current, e)
			}
			return prefix
		})
		w.after = k.rev
	case fromRev < k.evStart:
		k.mu.Unlock()
		return nil, false
	default:
		for _, l := range k.events {
			if l.rev > fromRev && w.match(l.key) {
				replay = append(replay, l)
			}
		}
		w.after = max(fromRev, k.rev)
	}
	if k.closed {
		k.mu.Unlock()
		return nil, false // the cache stopped: etcd serves it
	}
	k.watchers[w] = struct{}{}
	k.mu.Unlock()
	for _, e := range current {
		initial = append(initial, Event[T]{Type: shoalv1.EventType_ADDED, Object: e.object(k.codec, e.rev), Revision: e.rev, key: e.key})
	}

	go func() {
		defer close(out)
		defer func() {
			k.mu.Lock()
			delete(k.watchers, w)
			k.mu.Unlock()
		}()
		last := fromRev
		if fromRev == 0 {
			last = w.after
		}
		// resume is where a watch that ends now resumes: after the last
		// revision delivered whole. undelivered is the revision of the
		// first event that was not delivered; a revision of several events
		// (a relist's differences all have one) delivered in part is
		// resumed from just below it.
		resume := func(undelivered int64) int64 {
			if undelivered == last {
				return last - 1
			}
			return last
		}
		deliver := func(e Event[T], live bool) bool {
			e.Object = clone(e.Object) // readers may change what they get
			if !live {
				select {
				case out <- e:
				case <-ctx.Done():
					return false
				}
			} else if sent, slow := sendOrGiveUp(ctx, out, e); !sent {
				if slow {
					giveUp(ctx, out, resume(e.Revision))
				}
				return false
			}
			last = max(last, e.Revision)
			return true
		}
		for _, e := range initial {
			if !deliver(e, false) {
				return
			}
		}
		for _, l := range replay {
			e, err := k.event(l)
			if err != nil {
				// Bytes that decoded when they came cannot fail now.
				k.c.log.Warn("logged event does not decode; skipped", "key", l.key, "revision", l.rev, "err", err)
				continue
			}
			if keep != nil && !keep(e.Object) {
				continue
			}
			if !deliver(e, true) {
				return
			}
		}
		if fromRev == 0 {
			last = w.after
		}
		for {
			w.mu.Lock()
			q, overflow, dropped, stopped := w.queue, w.overflow, w.dropped, w.stopped
			w.queue = nil
			w.mu.Unlock()
			for _, e := range q {
				if !deliver(e, true) {
					return
				}
			}
			switch {
			case overflow:
				giveUp(ctx, out, resume(dropped))
				return
			case stopped:
				select {
				case out <- Event[T]{Err: shoal.Unavailable("watch ended: the node's watch cache stopped; watch again from resource_version %d", last)}:
				case <-ctx.Done():
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
		}
	}()
	return out, true
}

// sendOrGiveUp sends e at once if the reader has room, else waits up to
// SlowWatcherGrace; slow reports a reader that left its channel full that
// long (the watch must then end: nothing more may queue for it).
func sendOrGiveUp[T any](ctx context.Context, out chan Event[T], e Event[T]) (sent, slow bool) {
	select {
	case out <- e:
		return true, false
	case <-ctx.Done():
		return false, false
	default:
	}
	t := time.NewTimer(SlowWatcherGrace)
	defer t.Stop()
	select {
	case out <- e:
		return true, false
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return false, true
	}
}

// giveUp ends a watch whose reader fell behind, saying where to resume.
func giveUp[T any](ctx context.Context, out chan Event[T], resume int64) {
	e := Event[T]{Err: shoal.ResourceExhausted("watch ended: its reader fell too far behind (a full buffer for %s, or more events queued than a watch may hold); watch again from resource_version %d",
		SlowWatcherGrace, resume)}
	select {
	case out <- e:
	case <-ctx.Done():
	}
}

// stopWatchers ends every client watch of the kind: the cache is stopping.
func (k *kindCache[T]) stopWatchers() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	for w := range k.watchers {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
