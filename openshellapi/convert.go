package openshellapi

import (
	"maps"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
)

// From shoal's objects to OpenShell's. Nothing here reads or writes: the
// methods convert what the shoal.v1 methods returned.

func metaOf(m *shoalv1.ObjectMeta) *datamodelv1.ObjectMeta {
	if m == nil {
		return nil
	}
	out := &datamodelv1.ObjectMeta{
		Id:              m.Uid,
		Name:            m.Name,
		CreatedAtMs:     millis(m.CreatedAt),
		Labels:          maps.Clone(m.Labels),
		ResourceVersion: uint64(max(m.ResourceVersion, 0)),
		Annotations:     maps.Clone(m.Annotations),
		Workspace:       ws(m.Workspace),
	}
	if m.DeletionTimestamp != nil {
		out.DeletionTimestampMs = max(millis(m.DeletionTimestamp), 1)
	}
	return out
}

func millis(t *timestamppb.Timestamp) int64 {
	if t == nil {
		return 0
	}
	return t.AsTime().UnixMilli()
}

// sandboxOf converts a sandbox. Its spec is what shoal keeps of the one it
// was created with: environment, image, command and providers; and its
// policy, the current one (spec.egress, policyOf).
func sandboxOf(sb *shoalv1.Sandbox) *openshellv1.Sandbox {
	if sb == nil {
		return nil
	}
	spec := sb.GetSpec()
	out := &openshellv1.Sandbox{
		Metadata: metaOf(sb.Meta),
		Spec: &openshellv1.SandboxSpec{
			Environment: maps.Clone(spec.GetEnv()),
			Template:    &openshellv1.SandboxTemplate{Image: spec.GetImage()},
			Providers:   append([]string(nil), spec.GetProviders()...),
			Command:     append([]string(nil), spec.GetCommand()...),
			Policy:      policyOf(spec.GetEgress()),
		},
		Status: statusOf(sb),
	}
	return out
}

// Conditions shoal adds to OpenShell's status where a phase has no
// OpenShell equivalent.
const (
	ConditionPaused = "Paused"
	ConditionExited = "Exited"
)

// statusOf maps shoal's phases one to one where OpenShell has the phase.
// A command that exited by itself (STOPPED, not stopped on request) is
// OpenShell's ERROR with its exit code; a paused container (PAUSED: its
// node fenced it, or docker pause) is UNKNOWN, with a condition saying why.
func statusOf(sb *shoalv1.Sandbox) *openshellv1.SandboxStatus {
	st := sb.GetStatus()
	out := &openshellv1.SandboxStatus{
		SandboxName: sb.GetMeta().GetName(),
		AgentPod:    st.GetContainerId(),
		// The policy version the owning node enforces.
		CurrentPolicyVersion: uint32(min(max(st.GetEgressAppliedVersion(), 0), math.MaxUint32)),
	}
	for _, c := range st.GetConditions() {
		out.Conditions = append(out.Conditions, conditionOf(c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime))
	}
	// A stop or start the owner has not acted on yet: the phase it moves
	// to, not the one it leaves (a start's STOPPED would read as a command
	// that exited, ERROR).
	stopWanted := sb.GetSpec().GetRunState() == shoalv1.RunState_RUN_STATE_STOPPED
	if st.GetObservedRunGeneration() < sb.GetSpec().GetRunGeneration() && sb.GetMeta().GetDeletionTimestamp() == nil {
		switch ph := st.GetPhase(); {
		case stopWanted && (ph == shoalv1.SandboxPhase_READY || ph == shoalv1.SandboxPhase_STARTING):
			out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
			return out
		case !stopWanted && (ph == shoalv1.SandboxPhase_STOPPED || ph == shoalv1.SandboxPhase_STOPPING):
			out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING
			return out
		}
	}
	switch st.GetPhase() {
	case shoalv1.SandboxPhase_SANDBOX_PHASE_UNSPECIFIED, shoalv1.SandboxPhase_PROVISIONING:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING
	case shoalv1.SandboxPhase_READY:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
	case shoalv1.SandboxPhase_ERROR:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
	case shoalv1.SandboxPhase_STOPPED:
		if stopWanted {
			out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED
			break
		}
		code := st.GetExitCode()
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
		out.ExitCode = &code
		out.Conditions = append(out.Conditions, conditionOf(ConditionExited, "True", "CommandExited", st.GetMessage(), containerSince(st)))
	case shoalv1.SandboxPhase_DELETING:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING
	case shoalv1.SandboxPhase_PAUSED:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_UNKNOWN
		out.Conditions = append(out.Conditions, conditionOf(ConditionPaused, "True", "ContainerPaused", st.GetMessage(), containerSince(st)))
	case shoalv1.SandboxPhase_UNKNOWN:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_UNKNOWN
	case shoalv1.SandboxPhase_STOPPING:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
	case shoalv1.SandboxPhase_STARTING:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING
	default:
		out.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_UNKNOWN
	}
	return out
}

// containerSince is when the agent last saw the container's state change
// (shoal's ContainerPresent condition, which an exit or a pause moves):
// the time of the conditions made from that state.
func containerSince(st *shoalv1.SandboxStatus) *timestamppb.Timestamp {
	for _, c := range st.GetConditions() {
		if c.Type == "ContainerPresent" {
			return c.LastTransitionTime
		}
	}
	return nil
}

func conditionOf(typ, status, reason, message string, at *timestamppb.Timestamp) *openshellv1.SandboxCondition {
	c := &openshellv1.SandboxCondition{Type: typ, Status: status, Reason: reason, Message: message}
	if at != nil {
		c.LastTransitionTime = at.AsTime().UTC().Format(time.RFC3339Nano)
	}
	return c
}

// Redacted stands in for every credential value in responses, as in
// OpenShell's own.
const Redacted = "REDACTED"

// providerOf converts a provider, credential values redacted (keys kept).
// Its type is the name it was created with (shoalv1.Provider.type_name).
func providerOf(p *shoalv1.Provider) *datamodelv1.Provider {
	if p == nil {
		return nil
	}
	out := &datamodelv1.Provider{
		Metadata: metaOf(p.Meta),
		Type:     p.EffectiveTypeName(),
		Config:   maps.Clone(p.Config),
	}
	if len(p.Credentials) > 0 {
		out.Credentials = make(map[string]string, len(p.Credentials))
		for k := range p.Credentials {
			out.Credentials[k] = Redacted
		}
	}
	return out
}

// shoalType is the shoal provider type nearest to an OpenShell type name;
// the name itself is kept as type_name.
func shoalType(name string) shoalv1.ProviderType {
	switch strings.ToLower(name) {
	case "nvidia":
		return shoalv1.ProviderType_NVIDIA
	case "openai":
		return shoalv1.ProviderType_OPENAI
	case "anthropic", "claude":
		return shoalv1.ProviderType_ANTHROPIC
	case "github":
		return shoalv1.ProviderType_GITHUB
	}
	return shoalv1.ProviderType_GENERIC
}
