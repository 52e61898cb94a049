package docker

import (
	"context"
	"sync"

	"golang.org/x/sync/semaphore"
)

// freezeGuard keeps a container's freeze (Pause) apart from the start of
// an exec in it. `runc exec` joins the container's cgroup before the exec'd
// process runs: when the cgroup is frozen at that moment, runc waits on the
// frozen process for good while the engine's shim holds the container for
// that exec, so the later unpause, stop or force-remove of the container
// never completes either (cluster chaos: a DELETING sandbox's container on
// a fenced node stayed paused for the rest of the run, with a `runc exec`
// blocked in it since the freeze). Docker refuses an exec into a container
// that is paused already; what it does not prevent is a pause landing
// while an exec is starting. So:
//
//   - an exec holds its container's guard shared from before the engine
//     creates it until its process has started (its wrapper's pid line
//     arrived: execWrapper) or has ended, never for the whole session;
//   - Pause holds it exclusively: it waits for the execs that are starting
//     to have started (they are frozen with the rest), and an exec that
//     asks while a freeze waits or runs starts after it, when the engine
//     refuses it (the container is paused).
//
// A waiting freeze goes before later execs (the semaphore is FIFO), so a
// stream of execs cannot hold a fence off.
type freezeGuard struct {
	mu  sync.Mutex
	ids map[string]*guardEntry
}

type guardEntry struct {
	sem  *semaphore.Weighted
	refs int // holders and waiters; the entry goes at zero
}

// freezeWeight is the exclusive weight: more than any number of execs of
// one container starting at once.
const freezeWeight = 1 << 30

// starting holds id's guard shared until release is called (idempotent).
func (g *freezeGuard) starting(ctx context.Context, id string) (release func(), err error) {
	return g.acquire(ctx, id, 1)
}

// freezing holds id's guard exclusively until release is called.
func (g *freezeGuard) freezing(ctx context.Context, id string) (release func(), err error) {
	return g.acquire(ctx, id, freezeWeight)
}

func (g *freezeGuard) acquire(ctx context.Context, id string, n int64) (func(), error) {
	g.mu.Lock()
	if g.ids == nil {
		g.ids = make(map[string]*guardEntry)
	}
	e := g.ids[id]
	if e == nil {
		e = &guardEntry{sem: semaphore.NewWeighted(freezeWeight)}
		g.ids[id] = e
	}
	e.refs++
	g.mu.Unlock()
	if err := e.sem.Acquire(ctx, n); err != nil {
		g.drop(id, e)
		return nil, err
	}
	return sync.OnceFunc(func() {
		e.sem.Release(n)
		g.drop(id, e)
	}), nil
}

func (g *freezeGuard) drop(id string, e *guardEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(g.ids, id)
	}
}

// held reports how many containers have a guard entry (tests: none may
// be left behind).
func (g *freezeGuard) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ids)
}
