package agent

import (
	"context"
	"errors"
	"time"

	"shoal"
	"shoal/internal/backoff"
)

// Execs left running by an earlier run of this node.
//
// An exec is served by its sandbox's owner (package apiserver; other nodes
// relay it), and the owner kills it when its caller goes away. A node
// process that dies (SIGKILL, a crash, the OOM killer) kills nothing, and
// Docker runs an exec on when the connection attached to it closes: after
// the node is back, its execs would run on in their containers with nobody
// attached. So, once the node has first rejoined after a start (it holds
// its lease and has thawed what it froze), the agent has its runtime look
// into each container that runs and kill the execs that an earlier run
// started (Runtime.ReapExecs; the runtime marks every exec with its own
// token), and logs what it killed. Only execs are reaped: the sandbox's
// own command, what it started, and what a finished exec left running are
// not. A container that cannot be looked into now (paused, engine
// trouble) is tried again every sweepRetry until it can; the sweep ends
// once every container that existed at the start has been looked at: the
// containers made later hold only this run's execs.

// sweepRetry is how often containers a sweep could not look into are
// tried again.
const sweepRetry = 5 * time.Second

// sweepExecs reaps the execs of earlier runs of this node, once, after the
// first rejoin. It runs in a goroutine of its own that Start waits for,
// so that neither the lease checks nor the reconciles wait on it.
func (a *Agent) sweepExecs(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-a.rejoined:
	}
	var pending map[string]shoal.Container // nil until the containers are listed
	// Retry ends only when every pending container is swept or ctx ends.
	_ = backoff.Retry(ctx, sweepPolicy, func(int) error {
		pending = a.sweepOnce(ctx, pending)
		if pending != nil && len(pending) == 0 {
			return nil
		}
		return errSweepPending
	})
}

// sweepPolicy retries a sweep every sweepRetry, without end.
var sweepPolicy = backoff.Policy{Initial: sweepRetry, Max: sweepRetry}

// errSweepPending is a sweep that left containers to sweep again.
var errSweepPending = errors.New("execs of an earlier run still pending")

// sweepOnce lists the containers the first time (pending nil), reaps the
// execs of earlier runs in each pending one, and returns those still
// pending. Like every change but removal, it is made only while the node
// holds its lease.
func (a *Agent) sweepOnce(ctx context.Context, pending map[string]shoal.Container) map[string]shoal.Container {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if held, _ := a.cfg.Lease.State(); !held || a.engineIsDown() {
		return pending // nothing is asked of an engine that does not answer (engine.go)
	}
	if pending == nil {
		cs, err := a.cfg.Runtime.List(ctx)
		if err != nil {
			a.log.Warn("execs of an earlier run: list containers; trying again", "err", err)
			return nil
		}
		pending = map[string]shoal.Container{}
		for _, c := range cs {
			if c.State == "running" || c.State == "paused" {
				pending[c.ID] = c
			}
		}
	}
	for id, c := range pending {
		if held, _ := a.cfg.Lease.State(); !held || ctx.Err() != nil || a.engineIsDown() {
			return pending
		}
		reaped, err := a.cfg.Runtime.ReapExecs(ctx, id)
		for _, e := range reaped {
			a.log.Info("killed an exec an earlier run of this node left running; nobody was attached to it any more",
				"sandbox", c.Workspace+"/"+c.Name, "container", id[:min(12, len(id))], "pid", e.PID, "command", e.Command)
		}
		switch shoal.KindOf(err) {
		case shoal.KindUnknown:
			if err == nil {
				delete(pending, id)
				continue
			}
			if ctx.Err() == nil {
				a.log.Warn("execs of an earlier run: could not look into a container; trying again", "sandbox", c.Workspace+"/"+c.Name, "err", err)
			}
		case shoal.KindFailedPrecondition:
			// Its image lacks what the look needs: trying again cannot help.
			a.log.Warn("execs of an earlier run cannot be looked for in this sandbox", "sandbox", c.Workspace+"/"+c.Name, "err", err)
			delete(pending, id)
		}
		// Others (a paused container) are tried again quietly.
	}
	return pending
}
