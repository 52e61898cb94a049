package testenv_test

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
)

// The harness itself: three nodes, each on its own engine; a sandbox runs
// on the node that took its create and its container is on that node's
// engine only; a node killed with SIGKILL serves again after a restart and
// its container outlived it; a node cut off from etcd fails its calls and
// serves again once healed; a frozen node answers nothing until resumed.
func TestClusterHarness(t *testing.T) {
	start := time.Now()
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	t.Logf("cluster of %d up in %s (separate engines: %v)", c.Len(), time.Since(start).Round(time.Millisecond), c.SeparateEngines())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	names := []string{"on-zero", "on-one", "on-two"}
	sbs := make([]*shoalv1.Sandbox, c.Len())
	for i, name := range names {
		// Placed on node i (--node) and created through it.
		sbs[i] = create(t, ctx, c.Client(i), name, c.ID(i))
		if sbs[i].Status.Node != c.ID(i) {
			t.Fatalf("%s was placed on node %d (%s) but runs on %q", name, i, c.ID(i), sbs[i].Status.Node)
		}
		onlyOn(t, ctx, c, i, sbs[i].Status.ContainerId)
	}

	// SIGKILL node 2: calls through it fail at once; its container stays.
	c.Kill(2)
	if _, err := get(ctx, c.Client(2), "on-zero", 2*time.Second); status.Code(err) != codes.Unavailable {
		t.Fatalf("get through a killed node: %v, want UNAVAILABLE", err)
	}
	onlyOn(t, ctx, c, 2, sbs[2].Status.ContainerId)
	t0 := time.Now()
	c.Restart(2)
	t.Logf("node 2 serves %s after its restart", time.Since(t0).Round(time.Millisecond))
	for i, name := range names {
		sb, err := get(ctx, c.Client(2), name, 5*time.Second)
		if err != nil {
			t.Fatalf("get %s through the restarted node: %v", name, err)
		}
		if sb.Status.ContainerId != sbs[i].Status.ContainerId || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			t.Fatalf("%s after the restart: container %.12s phase %s, want %.12s READY", name, sb.Status.ContainerId, sb.Status.Phase, sbs[i].Status.ContainerId)
		}
	}

	// Cut node 1 off from etcd: calls through it fail, the others serve.
	c.CutOff(1)
	_, err := get(ctx, c.Client(1), "on-one", 2*time.Second)
	if !unavailable(err) {
		t.Fatalf("get through a node cut off from etcd: %v, want UNAVAILABLE or DEADLINE_EXCEEDED", err)
	}
	t.Logf("get through the cut-off node: %s", status.Code(err))
	if _, err := get(ctx, c.Client(0), "on-one", 5*time.Second); err != nil {
		t.Fatalf("get through node 0 while node 1 is cut off: %v", err)
	}
	t0 = time.Now()
	c.Heal(1)
	c.WaitReady(1)
	t.Logf("node 1 serves %s after healing", time.Since(t0).Round(time.Millisecond))
	if sb, err := get(ctx, c.Client(1), "on-one", 5*time.Second); err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("get through the healed node: %v (%v)", sb.GetStatus(), err)
	}

	// Freeze node 0: calls through it time out; resumed, it serves.
	c.Stop(0)
	if _, err := get(ctx, c.Client(0), "on-zero", time.Second); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("get through a stopped node: %v, want DEADLINE_EXCEEDED", err)
	}
	c.Resume(0)
	c.WaitReady(0)
	onlyOn(t, ctx, c, 0, sbs[0].Status.ContainerId)
}

func create(t *testing.T, ctx context.Context, cl shoalv1.ShoalClient, name, node string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := cl.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name},
		Spec: &shoalv1.SandboxSpec{Node: node},
	}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create %s: phase %s (%s), want READY", name, sb.Status.Phase, sb.Status.Message)
	}
	return sb
}

func get(ctx context.Context, cl shoalv1.ShoalClient, name string, within time.Duration) (*shoalv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return cl.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
}

func unavailable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

// onlyOn checks that container id runs on node i's engine and, when the
// engines are separate, that no other engine has it or any container of
// node i.
func onlyOn(t *testing.T, ctx context.Context, c *testenv.Cluster, i int, id string) {
	t.Helper()
	info, err := c.Engine(i).Client.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("container %.12s on node %d's engine: %v", id, i, err)
	}
	if !info.State.Running || info.Config.Labels[docker.LabelNode] != c.ID(i) {
		t.Fatalf("container %.12s on node %d's engine: running %v, node label %q", id, i, info.State.Running, info.Config.Labels[docker.LabelNode])
	}
	if !c.SeparateEngines() {
		t.Logf("the nodes share one engine: not checking that the other engines lack %.12s", id)
		return
	}
	for j := range c.Len() {
		if j == i {
			continue
		}
		e := c.Engine(j).Client
		if _, err := e.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
			t.Fatalf("container %.12s of node %d is visible on node %d's engine (err %v)", id, i, j, err)
		}
		cs, err := e.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"="+c.ID(i)))})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 0 {
			t.Fatalf("node %d's engine has %d containers of node %d", j, len(cs), i)
		}
	}
}
