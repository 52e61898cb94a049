package workqueue

import (
	"context"
	"sync"
	"time"

	"shoal/internal/backoff"
)

// Queue holds items of type T identified by a key.
type Queue[T any] struct {
	key      func(T) string
	mu       sync.Mutex
	cond     *sync.Cond
	order    []T
	queued   map[string]bool
	inflight map[string]bool
	again    map[string]T
	failures map[string]int
	closed   bool
}

// MaxRetryDelay caps the per-key backoff of retried items.
const MaxRetryDelay = 30 * time.Second

// New returns an empty queue.
func New[T any](key func(T) string) *Queue[T] {
	q := &Queue[T]{key: key, queued: map[string]bool{}, inflight: map[string]bool{}, again: map[string]T{}, failures: map[string]int{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues t unless an item of its key is queued already.
func (q *Queue[T]) Add(t T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.key(t)
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

// Get blocks for the next item; false once the queue is closed.
func (q *Queue[T]) Get() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		var zero T
		return zero, false
	}
	t := q.order[0]
	q.order = q.order[1:]
	k := q.key(t)
	delete(q.queued, k)
	q.inflight[k] = true
	return t, true
}

// Done finishes an item from Get; retryAfter > 0 adds it again after a
// delay unless it was re-added meanwhile. The delay doubles with each
// consecutive retry of the same key (retryAfter, 2x, 4x, ... up to
// MaxRetryDelay), so an item that keeps failing, say a record that cannot
// be decoded, costs little; a Done with 0 resets it.
func (q *Queue[T]) Done(t T, retryAfter time.Duration) {
	q.mu.Lock()
	k := q.key(t)
	delete(q.inflight, k)
	again, ok := q.again[k]
	delete(q.again, k)
	retryAfter = q.backoff(k, retryAfter)
	if !ok && retryAfter > 0 && !q.closed {
		// A retry that fires after Close is dropped by Add.
		time.AfterFunc(retryAfter, func() { q.Add(t) })
	}
	q.mu.Unlock()
	if ok {
		q.Add(again)
	}
}

// backoff returns the delay of a key's next retry and counts it; a
// retryAfter of 0 (success) resets the key. Called with q.mu held.
func (q *Queue[T]) backoff(k string, retryAfter time.Duration) time.Duration {
	if retryAfter <= 0 {
		delete(q.failures, k)
		return 0
	}
	n := q.failures[k]
	q.failures[k] = n + 1
	// The caller's retryAfter is the base, so the Policy is per call; the
	// doublings stop after 16, as they always did.
	return backoff.Policy{Initial: retryAfter, Max: MaxRetryDelay}.Delay(min(n, 16))
}

// Close wakes every Get, which then returns false.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// Run serves the queue with n workers until ctx ends: it closes the queue
// then and returns once every worker has finished its item. handle returns
// how long to wait before retrying the item (0: done).
func (q *Queue[T]) Run(ctx context.Context, n int, handle func(T) time.Duration) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); <-ctx.Done(); q.Close() }()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t, ok := q.Get()
				if !ok {
					return
				}
				q.Done(t, handle(t))
			}
		}()
	}
	wg.Wait()
}
