package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/store"
	"shoal/workqueue"
)

// Engine health (docs/deploy.md, "When a node's engine dies"): the agent
// pings its container engine every EngineCheck. An engine that has not
// answered for EngineGrace is down: the node publishes the condition
// EngineUnavailable with its registration (placement skips it, /readyz
// fails), and every sandbox of the node is reconciled, which marks it
// UNKNOWN with the condition EngineReachable False (a sandbox being
// deleted keeps its phase and gets the condition as the reason its
// deletion waits). Nothing touches the engine meanwhile: provisioning and
// teardown wait. When the engine answers again the condition is cleared
// and every sandbox is reconciled again, from what the engine says now:
// a running container is READY, an exited one STOPPED with its exit
// code, a PROVISIONING sandbox is provisioned, a deletion completes.

// Pinger is the engine as the health check needs it.
type Pinger interface {
	Ping(ctx context.Context) error
	// Host names the engine in messages (its address).
	Host() string
}

// Conditions publishes the node's own conditions (package registry).
type Conditions interface {
	SetCondition(ctx context.Context, typ, status, reason, msg string) error
}

// Engine health defaults.
const (
	DefaultEngineCheck = time.Second
	// DefaultEngineGrace is used when neither EngineGrace nor the node's
	// TTL is known; the node passes 2 × its TTL.
	DefaultEngineGrace = 20 * time.Second
)

// engineHealth is what the agent knows of its engine.
type engineHealth struct {
	mu    sync.Mutex
	down  bool
	since time.Time // last answer before it went down
	err   error     // the last ping's error while down
	// outage is when the engine last went down (its last answer before),
	// kept after it is back: a container that exited after it was
	// stopped by the engine's death or restart, not by its command.
	outage time.Time
}

// EngineDown reports whether the agent counts its engine as down, since
// when (its last answer) and why.
func (a *Agent) EngineDown() (down bool, since time.Time, why string) {
	h := &a.engine
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return false, time.Time{}, ""
	}
	return true, h.since, a.engineText(h.since, h.err)
}

func (a *Agent) engineText(since time.Time, err error) string {
	host := ""
	if a.cfg.Engine != nil {
		host = " at " + a.cfg.Engine.Host()
	}
	return fmt.Sprintf("node %s: its container engine%s has not answered since %s: %v",
		a.cfg.Node, host, since.UTC().Format(time.RFC3339), err)
}

// engineUnreachable is whether the engine fails to answer a ping now (a
// failed call's cause, when the engine is not yet counted as down).
func (a *Agent) engineUnreachable(ctx context.Context) bool {
	if a.cfg.Engine == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return a.cfg.Engine.Ping(pctx) != nil && ctx.Err() == nil
}

func (a *Agent) engineIsDown() bool {
	down, _, _ := a.EngineDown()
	return down
}

// watchEngine pings the engine until ctx ends, publishing its health.
func (a *Agent) watchEngine(ctx context.Context, q *workqueue.Queue[item]) {
	if a.cfg.Engine == nil {
		return
	}
	tick := time.NewTicker(a.cfg.EngineCheck)
	defer tick.Stop()
	lastOK := time.Now()
	// Failing since the first failed ping after an answer: the grace is
	// counted from there, not from the last answer, so that a process
	// that was stopped (SIGSTOP, a paused host) and resumes does not count
	// the time it did not look as the engine's silence.
	var failingSince time.Time
	published := true // the node starts without the condition
	for {
		pctx, cancel := context.WithTimeout(ctx, max(a.cfg.EngineCheck, 2*time.Second))
		err := a.cfg.Engine.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		h := &a.engine
		h.mu.Lock()
		changed := false
		switch {
		case err == nil:
			lastOK, failingSince = now, time.Time{}
			if h.down {
				h.down, h.err, h.outage, changed = false, nil, h.since, true
			}
		case h.down:
			h.err = err
		case failingSince.IsZero():
			failingSince = now
		case now.Sub(failingSince) >= a.cfg.EngineGrace:
			h.down, h.since, h.err, changed = true, lastOK, err, true
		}
		down, since, perr := h.down, h.since, h.err
		h.mu.Unlock()
		if changed {
			published = false
			if down {
				a.log.Error("container engine down: placement skips this node and its sandboxes are UNKNOWN until it answers", "since", since, "err", perr)
			} else {
				a.log.Info("container engine answers again; reconciling every sandbox of this node", "down_since", since)
			}
			// Every sandbox: marked UNKNOWN, or read again from the engine.
			a.requeueAll(ctx, q)
		}
		if !published && a.cfg.Conditions != nil {
			status, reason, msg := "False", "EngineAnswers", ""
			if down {
				status, reason, msg = "True", "EngineNotAnswering", a.engineText(since, perr)
			}
			wctx, cancel := context.WithTimeout(ctx, stepTimeout)
			err := a.cfg.Conditions.SetCondition(wctx, store.ConditionEngineUnavailable, status, reason, events.Truncate(msg, MaxMessageBytes))
			cancel()
			if err != nil {
				a.log.Warn("publish the engine's condition; will retry", "err", err)
			} else {
				published = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// requeueAll queues every sandbox of this node.
func (a *Agent) requeueAll(ctx context.Context, q *workqueue.Queue[item]) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	page, err := a.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return store.NodeOf(sb) == a.cfg.Node
	})
	if err != nil {
		// The periodic resync queues them all too.
		a.log.Warn("list this node's sandboxes after an engine change; the resync will", "err", err)
		return
	}
	for _, sb := range page.Items {
		q.Add(item{sb.Meta.Workspace, sb.Meta.Name})
	}
}

// engineGone is reconcile while the engine is down: nothing is asked of
// the engine; the sandbox says why its state is not known. A sandbox being
// provisioned stays PROVISIONING (it is provisioned when the engine
// answers) and one being deleted keeps DELETING: both get the condition,
// the reason they wait.
func (a *Agent) engineGone(ctx context.Context, sb *shoalv1.Sandbox) error {
	_, _, why := a.EngineDown()
	msg := events.Truncate(why, MaxMessageBytes)
	if c := condition(sb.GetStatus(), store.ConditionEngineReachable); c != nil && c.Status == "False" &&
		(sb.Meta.DeletionTimestamp != nil || sb.Status.Phase == shoalv1.SandboxPhase_PROVISIONING || sb.Status.Phase == shoalv1.SandboxPhase_UNKNOWN) {
		return nil // says so already (a resync while down)
	}
	var newly bool // the sandbox learns of it now: its event
	updated, err := a.cfg.Store.UpdateSandbox(ctx, sb.Meta.Workspace, sb.Meta.Name, store.Preconditions{UID: sb.Meta.Uid},
		func(cur *shoalv1.Sandbox) error {
			if cur.Status == nil {
				cur.Status = &shoalv1.SandboxStatus{}
			}
			st := cur.Status
			newly = !beforeOf(st).engineDown
			store.SetCondition(st, store.ConditionEngineReachable, "False", "EngineNotAnswering", msg)
			if cur.Meta.DeletionTimestamp == nil && st.Phase != shoalv1.SandboxPhase_PROVISIONING {
				st.Phase = shoalv1.SandboxPhase_UNKNOWN
				st.Message = msg
			}
			return nil
		})
	if err == nil && newly {
		a.recordEngineDown(updated, msg)
	}
	return ignoreGone(err)
}

// stoppedByOutage says, for a container that exited, whether it exited
// after its engine last went down: the engine's death or restart (Docker
// without live-restore stops every container when it starts again) ended
// it, whatever exit code Docker then reports.
func (a *Agent) stoppedByOutage(st shoal.ContainerState) (bool, time.Time) {
	h := &a.engine
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.outage.IsZero() && st.Exists && !st.Running && st.FinishedAt.After(h.outage), h.outage
}

// engineBack clears the condition engineGone set, as part of a status
// write made from what the engine says now.
func engineBack(st *shoalv1.SandboxStatus) {
	if c := condition(st, store.ConditionEngineReachable); c != nil && c.Status != "True" {
		store.SetCondition(st, store.ConditionEngineReachable, "True", "EngineAnswers", "")
	}
}

func condition(st *shoalv1.SandboxStatus, typ string) *shoalv1.Condition {
	for _, c := range st.GetConditions() {
		if c.Type == typ {
			return c
		}
	}
	return nil
}
