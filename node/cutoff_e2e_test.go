package node_test

import (
	"context"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// A node restarted while cut off from etcd cannot register, so its agent
// never starts; it must still freeze its containers once its TTL has
// passed since it started, as a running node that loses etcd does (the
// cluster completes deletions of its sandboxes after the fence margin),
// and thaw them when it joins.
func TestRestartedWhileCutOffFreezes(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Args: []string{"--node-ttl", ttl.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := create(t, ctx, c.Client(0), "kept", c.ID(1))
	id := sb.Status.ContainerId
	eng := c.Engine(1).Client

	c.Kill(1)
	c.CutOff(1)
	started := time.Now()
	c.Start(1)
	testenv.Eventually(t, 30*time.Second, "the restarted, cut-off node froze its container", func() (bool, error) {
		ci, err := eng.ContainerInspect(ctx, id)
		if err != nil {
			return false, err
		}
		return ci.State.Paused, nil
	})
	t.Logf("restart while cut off → container frozen: %s (--node-ttl %s)", time.Since(started).Round(time.Millisecond), ttl)
	if !c.Running(1) {
		t.Fatalf("the cut-off node exited instead of waiting for etcd")
	}

	c.Heal(1)
	c.WaitReady(1)
	testenv.Eventually(t, 30*time.Second, "the node thawed its container after joining", func() (bool, error) {
		ci, err := eng.ContainerInspect(ctx, id)
		if err != nil {
			return false, err
		}
		return ci.State.Running && !ci.State.Paused, nil
	})
	testenv.Eventually(t, 30*time.Second, "kept is READY again", func() (bool, error) {
		sb, err := c.Client(0).GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "kept"})
		return err == nil && sb.Status.Phase == shoalv1.SandboxPhase_READY, err
	})
}
