package hollow

import (
	"context"
	"fmt"
	"slices"

	"shoal"
)

// Egress sidecars, simulated: a hollow node started with --hollow-egress
// runs the agent's egress enforcement for real (a socket per sandbox with
// rules, served by the node's proxy, which reads each sandbox's policy)
// and only the sidecar that would join the container's network namespace
// and relay to that socket is a record here. A client that connects to a
// sandbox's socket is where a real sidecar would connect: it meets the
// same admission, at the policy version the proxy has. That is what the
// egress figure of a node with 1,000 sandboxes measures
// (BenchmarkEgressPolicyAtScale).

// EnsureEgress records a sidecar for the running container s.Container,
// as docker's EnsureEgress starts one (idempotent).
func (r *Runtime) EnsureEgress(ctx context.Context, s shoal.EgressSidecar) error {
	if err := r.running(s.Container); err != nil {
		return err
	}
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Again after the engine's latency: the container may have gone or
	// stopped meanwhile, and a sidecar is never left for a container
	// that does not run.
	if c, ok := r.containers[s.Container]; !ok || !c.running || c.UID != s.UID {
		return fmt.Errorf("egress sidecar: sandbox container %s is not running", s.Container)
	}
	r.egress[s.UID] = s
	return nil
}

// running is nil if container id runs.
func (r *Runtime) running(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; !ok || !c.running {
		return fmt.Errorf("egress sidecar: sandbox container %s is not running", id)
	}
	return nil
}

// RemoveEgress removes the sidecar of sandbox uid (none is not an error).
func (r *Runtime) RemoveEgress(ctx context.Context, uid string) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.egress, uid)
	return nil
}

// EgressSidecars lists the uids of the sandboxes with a sidecar.
func (r *Runtime) EgressSidecars(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.egress))
	for uid := range r.egress {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out, nil
}
