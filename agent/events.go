package agent

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/store"
)

// Events is what the agent needs of package events: it records what it did
// to its sandboxes' containers, and what it saw them do (doc.go of package
// events lists the reasons). Record never blocks and never fails.
type Events interface {
	Record(sb *shoalv1.Sandbox, e events.Event)
}

var _ Events = (*events.Recorder)(nil)

// record records e about sb, if the agent has an Events.
func (a *Agent) record(sb *shoalv1.Sandbox, e events.Event) {
	if a.cfg.Events != nil && sb != nil {
		a.cfg.Events.Record(sb, e)
	}
}

// containerRef is the sandbox of one of this node's containers, as its
// labels name it, for the events of freeze and rejoin.
func (a *Agent) containerRef(c shoal.Container) *shoalv1.Sandbox {
	if c.Workspace == "" || c.Name == "" {
		return nil // not labelled as a sandbox's: nothing to key an event by
	}
	return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: c.Workspace, Name: c.Name, Uid: c.UID},
		Spec: &shoalv1.SandboxSpec{Node: a.cfg.Node}}
}

// stopRequested reports whether a sandbox's container stopped because a
// stop was asked for (shoal sandbox stop), rather than by itself (its
// command ended, it was killed, or its engine stopped it): the Stopped
// event says which, as the condition Stopped's reason does (runstate.go).
func stopRequested(sb *shoalv1.Sandbox) bool {
	if c := condition(sb.GetStatus(), ConditionStopped); c != nil && c.Status == "True" {
		return c.Reason == "StopRequested"
	}
	return wantStopped(sb)
}

// before is what a status write's events compare with: the status as it
// was.
type before struct {
	phase      shoalv1.SandboxPhase
	nodeLost   bool // the leader's NodeLost condition was True
	engineDown bool // the agent's EngineReachable condition was False
}

func beforeOf(st *shoalv1.SandboxStatus) before {
	b := before{phase: st.GetPhase(), nodeLost: nodeLost(st)}
	if c := condition(st, store.ConditionEngineReachable); c != nil && c.Status == "False" {
		b.engineDown = true
	}
	return b
}

// transition records what a status write observed: a change of phase, a
// node no longer lost, an engine that answers again.
func (a *Agent) transition(sb *shoalv1.Sandbox, was before) {
	st := sb.GetStatus()
	prev := was.phase
	if was.nodeLost && !nodeLost(st) {
		a.record(sb, events.Event{Reason: events.NodeReady,
			Message: fmt.Sprintf("node %s reports on the sandbox again: %s", a.cfg.Node, phaseName(st.GetPhase())),
			Details: map[string]string{"node": a.cfg.Node}})
	}
	if was.engineDown && !beforeOf(st).engineDown {
		a.record(sb, events.Event{Reason: events.EngineAvailable,
			Message: fmt.Sprintf("node %s's container engine answers again: %s", a.cfg.Node, phaseName(st.GetPhase())),
			Details: map[string]string{"node": a.cfg.Node}})
	}
	if st.GetPhase() == prev {
		return
	}
	id := st.GetContainerId()
	switch st.GetPhase() {
	case shoalv1.SandboxPhase_READY:
		switch {
		case prev == shoalv1.SandboxPhase_PAUSED && a.frozenIDs.remove(id):
			// Thawed said it: the pause was the node's own freeze.
		case prev == shoalv1.SandboxPhase_PAUSED:
			a.record(sb, events.Event{Reason: events.Unpaused, Message: fmt.Sprintf("container %s was unpaused", short(id)), Details: map[string]string{"container_id": id}})
		case prev == shoalv1.SandboxPhase_UNKNOWN:
			// NodeReady or EngineAvailable said it; the container ran on
			// (a freeze of it, if any, is over: Thawed said it).
			a.frozenIDs.remove(id)
		default:
			a.record(sb, events.Event{Reason: events.Started, Message: fmt.Sprintf("container %s is running", short(id)), Details: map[string]string{"container_id": id}})
		}
	case shoalv1.SandboxPhase_STOPPED:
		requested := stopRequested(sb)
		a.record(sb, events.Event{Reason: events.Stopped, Message: st.GetMessage(), Warning: st.GetExitCode() != 0 && !requested,
			Details: map[string]string{"container_id": id, "exit_code": fmt.Sprint(st.GetExitCode()), "requested": fmt.Sprint(requested)}})
	case shoalv1.SandboxPhase_PAUSED:
		if a.frozenIDs.has(id) {
			return // seen paused by the node's own freeze: Frozen said it
		}
		a.record(sb, events.Event{Reason: events.Paused, Message: st.GetMessage(), Details: map[string]string{"container_id": id}})
	case shoalv1.SandboxPhase_ERROR:
		d := map[string]string{}
		if id != "" {
			d["container_id"] = id
		}
		if st.GetExitCode() != 0 {
			d["exit_code"] = fmt.Sprint(st.GetExitCode())
		}
		a.record(sb, events.Event{Reason: events.Failed, Message: st.GetMessage(), Details: d})
	}
}

// recordEngineDown: the node's engine has not answered for its grace, so
// nothing is known of sb's container (engine.go), in the engine's words.
func (a *Agent) recordEngineDown(sb *shoalv1.Sandbox, why string) {
	a.record(sb, events.Event{Reason: events.EngineUnavailable, Message: why, Details: map[string]string{"node": a.cfg.Node}})
}

// nodeLost reports whether the leader's NodeLost condition is True.
func nodeLost(st *shoalv1.SandboxStatus) bool {
	for _, c := range st.GetConditions() {
		if c.Type == store.ConditionNodeLost && c.Status == "True" {
			return true
		}
	}
	return false
}

func phaseName(p shoalv1.SandboxPhase) string { return p.String() }

func short(id string) string { return id[:min(12, len(id))] }

// recordFrozen: freeze paused c, since the node does not hold its lease.
// The container is remembered as frozen, so that a status write that sees
// it paused before the thaw records no Paused (nor Unpaused after it).
func (a *Agent) recordFrozen(c shoal.Container) {
	a.frozenIDs.add(c.ID, time.Now())
	a.record(a.containerRef(c), events.Event{Reason: events.Frozen,
		Message: fmt.Sprintf("node %s does not hold its liveness lease: it paused container %s until it does (self-fencing)", a.cfg.Node, short(c.ID)),
		Details: map[string]string{"node": a.cfg.Node, "container_id": c.ID}})
}

// recordThawed: rejoin unpaused c, which freeze had paused.
func (a *Agent) recordThawed(c shoal.Container) {
	a.record(a.containerRef(c), events.Event{Reason: events.Thawed,
		Message: fmt.Sprintf("node %s holds its lease again: it unpaused container %s", a.cfg.Node, short(c.ID)),
		Details: map[string]string{"node": a.cfg.Node, "container_id": c.ID}})
}

// recordGoneOnRejoin: rejoin removed c, whose sandbox was removed while
// the node was away (its history is read by name, and outlives it).
func (a *Agent) recordGoneOnRejoin(c shoal.Container) {
	a.record(a.containerRef(c), events.Event{Reason: events.TornDown,
		Message: fmt.Sprintf("node %s removed the container when it was back: the sandbox was deleted while the node was away", a.cfg.Node),
		Details: map[string]string{"node": a.cfg.Node, "container_id": c.ID}})
}

// recordTornDown records the teardown of sb once: a teardown runs again
// when anything queues the sandbox before the leader removed its record
// (the engine's own events of the removal do), and one that runs after
// the removal finds nothing to record (RecordTeardown's compare fails)
// yet cannot tell.
func (a *Agent) recordTornDown(sb *shoalv1.Sandbox) {
	if !a.tornDown.add(sb.GetMeta().GetUid(), time.Now()) {
		return
	}
	a.record(sb, events.Event{Reason: events.TornDown, Message: fmt.Sprintf("node %s removed the container", a.cfg.Node), Details: map[string]string{"node": a.cfg.Node}})
}

// recent is a set of keys, each kept for recentFor after it was added.
type recent struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	pruned time.Time
}

// recentFor outlasts the leader's removal of a torn-down record by far.
const recentFor = 10 * time.Minute

// add adds key unless it is there already, and reports whether it added
// it; once a minute it forgets the keys older than recentFor.
func (r *recent) add(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]time.Time{}
	}
	if now.Sub(r.pruned) > time.Minute {
		r.pruned = now
		maps.DeleteFunc(r.seen, func(_ string, at time.Time) bool { return now.Sub(at) > recentFor })
	}
	if at, ok := r.seen[key]; ok && now.Sub(at) <= recentFor {
		return false
	}
	r.seen[key] = now
	return true
}

// has reports whether key was added within recentFor.
func (r *recent) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[key]
	return ok && time.Since(at) <= recentFor
}

// remove removes key, and reports whether it was there (within recentFor).
func (r *recent) remove(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[key]
	delete(r.seen, key)
	return ok && time.Since(at) <= recentFor
}
