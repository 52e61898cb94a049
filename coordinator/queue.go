package coordinator

import (
	"sync"
	"time"
)

// queue is a deduplicating work queue: a task added while queued or in
// flight runs once more after the current run, never twice at once.
type queue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	order    []task
	queued   map[string]bool
	inflight map[string]bool
	again    map[string]task
	closed   bool
}

func newQueue() *queue {
	q := &queue{queued: map[string]bool{}, inflight: map[string]bool{}, again: map[string]task{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(t task) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := t.key()
	switch {
	case q.closed, q.queued[k]:
	case q.inflight[k]:
		q.again[k] = t
	default:
		q.queued[k] = true
		q.order = append(q.order, t)
		q.cond.Signal()
	}
}

// get blocks for the next task; false once the queue is closed.
func (q *queue) get() (task, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return task{}, false
	}
	t := q.order[0]
	q.order = q.order[1:]
	k := t.key()
	delete(q.queued, k)
	q.inflight[k] = true
	return t, true
}

// done finishes a task; retryAfter > 0 re-adds it after that delay.
func (q *queue) done(t task, retryAfter time.Duration) {
	q.mu.Lock()
	k := t.key()
	delete(q.inflight, k)
	again, ok := q.again[k]
	delete(q.again, k)
	if !ok && retryAfter > 0 && !q.closed {
		// A retry that fires after close is dropped by add.
		time.AfterFunc(retryAfter, func() { q.add(t) })
	}
	q.mu.Unlock()
	if ok {
		q.add(again)
	}
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}
