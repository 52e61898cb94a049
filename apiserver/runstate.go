package apiserver

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/durationpb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/store"
)

// Stop and start (shoal sandbox stop/start): the desired run state is
// part of the spec (run_state, with run_generation moving at each request
// that changes something), written through the store's update loop like
// every write, so a concurrent label write or status sync never makes a
// stop fail and --if-version applies it only at the version the caller
// saw. The owning agent converges the container to it and records the
// generation it acted on (status.observed_run_generation): that is what
// a wait waits for.
//
// A request that changes nothing writes nothing and succeeds: a stop of a
// sandbox that is stopped or stopping on request, a start of one that is
// meant to run and is not STOPPED (READY, PROVISIONING, STARTING, PAUSED,
// UNKNOWN). A start of a sandbox whose command exited by itself (STOPPED,
// run state RUNNING) starts the container again, as docker start does; a
// start of one in phase ERROR is refused (FAILED_PRECONDITION): what
// failed would fail again, it is deleted and created anew.

func (s *Server) StopSandbox(ctx context.Context, req *shoalv1.StopSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, err
	}
	if req.Grace != nil {
		if err := validGrace("grace", req.Grace); err != nil {
			return nil, err
		}
	}
	var changed bool // this request moved the run generation: its event
	sb, err := s.cfg.Store.UpdateSandbox(ctx, ws(req.Workspace), req.Name, store.Preconditions{ResourceVersion: req.ResourceVersion},
		func(sb *shoalv1.Sandbox) error {
			changed = false
			spec := specOf(sb)
			grace := durationpb.New(shoal.DefaultStopGrace)
			if req.Grace != nil {
				grace = req.Grace
			}
			if spec.RunState == shoalv1.RunState_RUN_STATE_STOPPED {
				// Stopped, or being stopped: a shorter grace cuts a stop
				// in progress short (a second docker stop -t 0 does).
				stopping := sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_STOPPING || !sb.RunStateReached()
				if stopping && req.Grace != nil && grace.AsDuration() < spec.GetStopGrace().AsDuration() {
					spec.StopGrace = grace
					spec.RunGeneration++
					changed = true
				}
				return nil
			}
			spec.RunState = shoalv1.RunState_RUN_STATE_STOPPED
			spec.RunGeneration++
			spec.StopGrace = grace
			changed = true
			return nil
		})
	if err == nil && changed {
		recordRunStateRequested(ctx, s.cfg.Events, sb, events.StopRequested)
	}
	if err != nil || !req.Wait {
		return sb, err
	}
	return s.waitRunState(ctx, sb, "stopped")
}

func (s *Server) StartSandbox(ctx context.Context, req *shoalv1.StartSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, err
	}
	if err := validVersion("run_generation", req.RunGeneration); err != nil {
		return nil, err
	}
	var changed bool // this request moved the run generation: its event
	sb, err := s.cfg.Store.UpdateSandbox(ctx, ws(req.Workspace), req.Name, store.Preconditions{ResourceVersion: req.ResourceVersion},
		func(sb *shoalv1.Sandbox) error {
			changed = false
			spec := specOf(sb)
			running := spec.RunState != shoalv1.RunState_RUN_STATE_STOPPED
			if running && sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_ERROR {
				return shoal.FailedPrecondition("sandbox %q is in phase ERROR (%s): it cannot be started; delete it and create it again", sb.Meta.Name, sb.GetStatus().GetMessage())
			}
			if running && sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_STOPPED {
				return nil // running, or on its way there
			}
			if running && sb.GetStatus().GetObservedRunGeneration() < spec.RunGeneration {
				return nil // a start not yet acted on
			}
			if req.RunGeneration != 0 && spec.RunGeneration != req.RunGeneration {
				return shoal.FailedPrecondition("sandbox %q had another stop or start meanwhile (run generation %d, not %d); it is left as that request made it",
					req.Name, spec.RunGeneration, req.RunGeneration)
			}
			spec.RunState = shoalv1.RunState_RUN_STATE_RUNNING
			spec.RunGeneration++
			changed = true
			return nil
		})
	if err == nil && changed {
		recordRunStateRequested(ctx, s.cfg.Events, sb, events.StartRequested)
	}
	if err != nil || !req.Wait {
		return sb, err
	}
	return s.waitRunState(ctx, sb, "started")
}

func specOf(sb *shoalv1.Sandbox) *shoalv1.SandboxSpec {
	if sb.Spec == nil {
		sb.Spec = &shoalv1.SandboxSpec{}
	}
	return sb.Spec
}

// waitRunState follows the sandbox from the revision of the request's
// write until the agent has acted on it (Sandbox.RunStateReached), the sandbox is
// deleted, or ctx ends.
func (s *Server) waitRunState(ctx context.Context, sb *shoalv1.Sandbox, what string) (*shoalv1.Sandbox, error) {
	if sb.RunStateReached() {
		return sb, nil
	}
	m := sb.Meta
	ctx, cancel := s.bindShutdown(ctx)
	w := store.NewWatch(cancel, s.cfg.Store.WatchSandboxes(ctx, m.Workspace, m.Name, m.ResourceVersion))
	defer w.Stop()
	for ev := range w.C {
		if ev.Err != nil {
			return nil, ev.Err
		}
		cur := ev.Object
		if cur.Meta.Uid != m.Uid || ev.Type == shoalv1.EventType_DELETED {
			return nil, shoal.NotFound("sandbox %q was deleted before it %s", m.Name, what)
		}
		if cur.Meta.DeletionTimestamp != nil {
			return nil, shoal.FailedPrecondition("sandbox %q is being deleted", m.Name)
		}
		if cur.RunStateReached() {
			return cur, nil
		}
	}
	if errors.Is(context.Cause(ctx), errShuttingDown) {
		return nil, shoal.Unavailable("the node shut down while waiting for sandbox %q to be %s; the request is recorded and goes on: wait again through another node", m.Name, what)
	}
	return nil, ctxDone(ctx, "waiting for sandbox "+m.Name+" to be "+what)
}
