package shoalv1

// RunStateReached reports whether the owning node has acted on the
// sandbox's last stop or start request (shoal sandbox stop/start): it
// observed that request's run generation and the phase is neither
// STOPPING nor STARTING. A stop or start --wait waits for this.
func (x *Sandbox) RunStateReached() bool {
	st := x.GetStatus()
	if st.GetObservedRunGeneration() < x.GetSpec().GetRunGeneration() {
		return false
	}
	return st.GetPhase() != SandboxPhase_STOPPING && st.GetPhase() != SandboxPhase_STARTING
}
