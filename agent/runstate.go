package agent

import (
	"context"
	"fmt"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/chaosbreak"
	"shoal/store"
)

// Stop and start (shoal sandbox stop/start, apiserver/runstate.go): the
// sandbox's spec says whether its container should run (run_state) and
// moves run_generation with each request; the owning agent converges the
// container to it in syncStatus and records the generation it acted on
// in status.observed_run_generation, which is what a wait waits for.
//
//   - Stop of a running container: phase STOPPING, docker stop (SIGTERM,
//     SIGKILL after spec.stop_grace), then STOPPED with the exit code and
//     the condition Stopped True, reason StopRequested. The container and
//     its files stay, and so do its node and its capacity slot.
//   - Start of a stopped one: phase STARTING, docker start of the same
//     container, then READY, or STOPPED/ERROR if its command ends at once
//     or cannot start. If the providers' credentials changed since the
//     container was made, it is first made again from its files with the
//     current environment (Runtime.Refresh, docker/refresh.go): the new id
//     is recorded, then the old container removed.
//   - A container that runs although its sandbox is meant to be stopped
//     (started by hand on the engine) is stopped again at the next sync;
//     one whose command exited by itself stays STOPPED with the condition
//     Stopped True, reason CommandExited, until a start is requested.
//
// Nothing here runs while the node does not hold its lease (reconcile
// returns first), so self-fencing never starts a stopped container.

// ConditionStopped says whether the container is stopped, and why:
// StopRequested (shoal sandbox stop) or CommandExited (by itself).
const ConditionStopped = "Stopped"

// DefaultStopGrace is the grace of a stop whose spec names none.
const DefaultStopGrace = 10 * time.Second

// wantStopped reports whether the sandbox is meant to be stopped.
func wantStopped(sb *shoalv1.Sandbox) bool {
	return sb.GetSpec().GetRunState() == shoalv1.RunState_RUN_STATE_STOPPED
}

// runStatePending reports whether a stop or start request has not been
// acted on yet.
func runStatePending(sb *shoalv1.Sandbox) bool {
	return sb.GetStatus().GetObservedRunGeneration() < sb.GetSpec().GetRunGeneration()
}

// stopping is a stop in flight: the request's generation and how to
// cut it short.
type stopping struct {
	gen    int64
	cancel context.CancelFunc
}

// stopContainer stops the sandbox's running container on request. The
// stop itself (its grace may be an hour) runs in a goroutine of the
// agent's own, not in the queue's worker, so that it holds up nothing
// else: the sandbox is queued again when it is done, and that reconcile
// records STOPPED. A newer request (a shorter grace) cuts it short and
// stops again; a deletion cancels it and removes the container; a start
// waits for it to end.
func (a *Agent) stopContainer(ctx context.Context, sb *shoalv1.Sandbox, id string) error {
	gen := sb.GetSpec().GetRunGeneration()
	uid := sb.Meta.Uid
	a.mu.Lock()
	if cur := a.stops[uid]; cur != nil {
		if cur.gen >= gen {
			a.mu.Unlock()
			return nil // in flight for this request already
		}
		cur.cancel() // a newer request: stop again with its grace
	}
	a.mu.Unlock()
	grace := shoal.DefaultStopGrace
	if g := sb.GetSpec().GetStopGrace(); g != nil {
		grace = g.AsDuration()
	}
	if chaosbreak.Is("ack-before-stop") {
		// Broken on purpose (test builds only): the stop is recorded as
		// done and never done.
		return a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
			s.Phase = shoalv1.SandboxPhase_STOPPED
			observeRunState(s, sb, gen, shoal.ContainerState{})
		})
	}
	if err := a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		s.Phase = shoalv1.SandboxPhase_STOPPING
		s.Message = fmt.Sprintf("stopping on request: SIGTERM, then SIGKILL after %s", grace)
	}); err != nil {
		return err
	}
	life, q := a.life, a.queue
	if life == nil { // not started by Start (tests of one reconcile)
		return a.cfg.Runtime.Stop(ctx, id, grace)
	}
	sctx, cancel := context.WithTimeout(life, grace+runTimeout)
	me := &stopping{gen: gen, cancel: cancel}
	a.mu.Lock()
	a.stops[uid] = me
	a.mu.Unlock()
	it := item{sb.Meta.Workspace, sb.Meta.Name}
	a.bg.Go(func() {
		defer cancel()
		_, span := a.cfg.Tracer.Start(sctx, "agent.Stop")
		err := a.cfg.Runtime.Stop(sctx, id, grace)
		span.End()
		a.mu.Lock()
		if a.stops[uid] == me {
			delete(a.stops, uid)
		}
		a.mu.Unlock()
		if err != nil && sctx.Err() == nil && shoal.KindOf(err) != shoal.KindNotFound {
			a.log.Warn("stop failed; will retry", "sandbox", it.key(), "err", err)
		}
		if life.Err() == nil {
			q.Add(it) // records STOPPED, or stops again
		}
	})
	return nil
}

// stopInFlight reports whether a stop of the sandbox is under way.
func (a *Agent) stopInFlight(uid string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stops[uid] != nil
}

// cancelStop cuts a stop in flight short (a deletion removes the
// container instead).
func (a *Agent) cancelStop(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.stops[uid]; cur != nil {
		cur.cancel()
		delete(a.stops, uid)
	}
}

// startContainer starts the sandbox's stopped container on request.
func (a *Agent) startContainer(ctx context.Context, sb *shoalv1.Sandbox, id string) error {
	ctx, span := a.cfg.Tracer.Start(ctx, "agent.Start")
	defer span.End()
	gen := sb.GetSpec().GetRunGeneration()
	if err := a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		s.Phase = shoalv1.SandboxPhase_STARTING
		s.Message = "starting the container again on request"
	}); err != nil {
		return err
	}
	var settle time.Duration
	if len(sb.GetSpec().GetCommand()) > 0 {
		settle = a.cfg.StartupWindow
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runTimeout)
	defer cancel()
	// The providers' current credentials: in a new container made from
	// this one's files if its environment is not theirs (docker/refresh.go).
	nid, refused, err := a.refresh(rctx, sb, id)
	switch {
	case refused != nil:
		return refused(ctx, gen)
	case shoal.KindOf(err) == shoal.KindNotFound:
		nid = id // removed outside shoal: Start and Inspect say so
	case err != nil:
		return fmt.Errorf("start %s: %w", sb.Meta.Name, err) // retried
	}
	if nid != id {
		if err := a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) { s.ContainerId = nid }); err != nil {
			// Not recorded: the next attempt refreshes the recorded one
			// again, and removes this one first.
			return err
		}
		a.record(sb, events.Event{Reason: events.Created, Message: fmt.Sprintf("created container %s from the files of %s, for the providers' current credentials in its environment", short(nid), short(id)),
			Details: map[string]string{"container_id": nid, "replaces": id}})
		if err := a.cfg.Runtime.RemoveContainer(ctx, id); err != nil {
			a.log.Warn("remove the container a refresh replaced; removed with the sandbox", "sandbox", sb.Meta.Name, "err", err)
		}
		id = nid
	}
	err = a.cfg.Runtime.Start(rctx, id, settle)
	if err != nil && shoal.KindOf(err) != shoal.KindNotFound && shoal.KindOf(err) != shoal.KindFailedPrecondition {
		return fmt.Errorf("start %s: %w", sb.Meta.Name, err) // retried
	}
	st, ierr := a.cfg.Runtime.Inspect(ctx, id)
	if ierr != nil {
		return ierr
	}
	// The container's tmpfs is empty after a start: the credential files
	// are written again before the sandbox is READY.
	if err := a.syncCredentialFiles(ctx, sb, id, st); err != nil {
		a.log.Warn("credential files not written; will retry", "sandbox", sb.Meta.Name, "err", err)
	}
	return a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
		observe(s, id, st)
		if err != nil && st.Exists && s.Phase != shoalv1.SandboxPhase_ERROR {
			// Docker refused the start (its words are scrubbed of the
			// container's environment).
			s.Phase = shoalv1.SandboxPhase_ERROR
			s.Message = err.Error()
			store.SetCondition(s, "ContainerPresent", "True", "StartFailed", s.Message)
		}
		observeRunState(s, sb, gen, st)
	})
}

// refresh gives the stopped container the environment its sandbox has
// now, before a start: the same id, or a new container's (the caller
// records it). A sandbox whose environment cannot be made (its
// providers clash, or it is too large) is not started: refused records
// that, with the request's generation, so that a wait ends.
func (a *Agent) refresh(ctx context.Context, sb *shoalv1.Sandbox, id string) (nid string, refused func(context.Context, int64) error, err error) {
	env, secrets, reason, err := a.containerEnv(ctx, sb)
	if err != nil && reason == "" {
		return "", nil, err // the store's: retried
	}
	if err != nil {
		msg := fmt.Sprintf("not started: %v", err)
		return "", func(ctx context.Context, gen int64) error {
			st, ierr := a.cfg.Runtime.Inspect(ctx, id)
			if ierr != nil {
				return ierr
			}
			a.record(sb, events.Event{Reason: events.Failed, Message: events.Truncate(msg, MaxMessageBytes)})
			return a.setStatus(ctx, sb, func(s *shoalv1.SandboxStatus) {
				observe(s, id, st)
				observeRunState(s, sb, gen, st)
				if s.Phase == shoalv1.SandboxPhase_STOPPED {
					s.Message = events.Truncate(msg, MaxMessageBytes)
					store.SetCondition(s, ConditionStopped, "True", reason, s.Message)
				}
			})
		}, nil
	}
	spec := sb.GetSpec()
	nid, err = a.cfg.Runtime.Refresh(ctx, id, shoal.ContainerSpec{
		UID: sb.Meta.Uid, Name: sb.Meta.Name, Workspace: sb.Meta.Workspace,
		Image: spec.GetImage(), Command: spec.GetCommand(), Env: env, Secrets: secrets, Egress: sb.HasEgress(),
	})
	return nid, nil, err
}

// observeRunState records, with a status write made from what the engine
// says (st), that the agent acted on generation gen of the run state read
// in sb, and why a stopped container is stopped.
func observeRunState(s *shoalv1.SandboxStatus, sb *shoalv1.Sandbox, gen int64, st shoal.ContainerState) {
	s.ObservedRunGeneration = max(s.ObservedRunGeneration, gen)
	switch s.Phase {
	case shoalv1.SandboxPhase_STOPPED:
		if wantStopped(sb) {
			s.Message = fmt.Sprintf("stopped on request (shoal sandbox stop); its command exited with code %d", s.ExitCode)
			if st.Exists && st.StartedAt.IsZero() {
				s.Message = "stopped on request (shoal sandbox stop) before its container first started; start runs it"
			}
			store.SetCondition(s, ConditionStopped, "True", "StopRequested", s.Message)
		} else {
			store.SetCondition(s, ConditionStopped, "True", "CommandExited", s.Message)
		}
	case shoalv1.SandboxPhase_READY:
		if c := condition(s, ConditionStopped); c != nil && c.Status != "False" {
			store.SetCondition(s, ConditionStopped, "False", "Started", "")
		}
	}
}
