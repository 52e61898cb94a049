package chaos

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
)

// Invariant 15, a stopped sandbox stays stopped (scenario stop-start):
// once a stop is acknowledged — the record says run state STOPPED, phase
// STOPPED, and the owning agent observed that request's generation — no
// process of that sandbox runs on any engine until a start is requested.
//
// Checked every 200 ms during the traffic and once after it: the records
// are read (one Txn), then every engine's containers, then the records
// again. A sandbox acknowledged stopped in the first read, whose run
// generation is the same in the second (no start, nor another stop, was
// requested meanwhile) or which is gone by then, must have no container
// running or paused (a paused one ran after the stop) on any engine at
// the moment the engine was listed, which lies between the two reads.
//
// Its liveness half: once the faults heal, no sandbox is left STOPPING or
// STARTING, or with a request its agent has not acted on (invariant 5
// on a single node, 12 on a cluster).
const invStoppedStays = "15-stopped-stays-stopped"

// stoppedAcked reports whether sb's stop is acknowledged.
func stoppedAcked(sb *shoalv1.Sandbox) bool {
	return sb.GetSpec().GetRunState() == shoalv1.RunState_RUN_STATE_STOPPED &&
		sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_STOPPED && sb.RunStateReached()
}

// runStateSettling says why a sandbox's run state is not settled, or "".
func runStateSettling(sb *shoalv1.Sandbox) string {
	st := sb.GetStatus()
	switch {
	case sb.GetMeta().GetDeletionTimestamp() != nil:
		return ""
	case st.GetPhase() == shoalv1.SandboxPhase_STOPPING, st.GetPhase() == shoalv1.SandboxPhase_STARTING:
		return st.GetPhase().String()
	case st.GetObservedRunGeneration() < sb.GetSpec().GetRunGeneration():
		return fmt.Sprintf("run generation %d requested, %d acted on", sb.GetSpec().GetRunGeneration(), st.GetObservedRunGeneration())
	}
	return ""
}

// checkStoppedStays makes one check of invariant 15; an error is a read
// that failed (the check is skipped, not failed).
func checkStoppedStays(ctx context.Context, e *env) ([]string, error) {
	before, err := e.st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	acked := map[string]*shoalv1.Sandbox{} // uid → record
	for _, sb := range before.Sandboxes {
		if stoppedAcked(sb) {
			acked[sb.GetMeta().GetUid()] = sb
		}
	}
	if len(acked) == 0 {
		return nil, nil
	}
	cs, err := e.containers(ctx)
	if err != nil {
		return nil, err
	}
	after, err := e.st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	gen := map[string]int64{}
	for _, sb := range after.Sandboxes {
		gen[sb.GetMeta().GetUid()] = sb.GetSpec().GetRunGeneration()
	}
	var out []string
	for _, c := range cs {
		sb, ok := acked[c.Labels[docker.LabelUID]]
		if !ok || (c.State != container.StateRunning && c.State != container.StatePaused) {
			continue
		}
		if g, live := gen[sb.Meta.Uid]; live && g != sb.Spec.RunGeneration {
			continue // a later request: the container may run again
		}
		out = append(out, fmt.Sprintf("sandbox %s/%s (uid %s) was acknowledged STOPPED at revision %d (run generation %d), but its container %s on node %s is %s before revision %d",
			sb.Meta.Workspace, sb.Meta.Name, sb.Meta.Uid, before.Revision, sb.Spec.RunGeneration, short(c.ID), c.Labels[docker.LabelNode], c.State, after.Revision))
	}
	return out, nil
}
