package node_test

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/google/uuid"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
)

// orphan makes a container labelled as a cluster's node's, with no record.
func orphan(t *testing.T, ctx context.Context, dc *client.Client, node, cluster string) string {
	t.Helper()
	labels := map[string]string{
		docker.LabelManaged: "true", docker.LabelUID: uuid.NewString(), docker.LabelName: "ghost",
		docker.LabelWorkspace: "default", docker.LabelNode: node,
	}
	if cluster != "" {
		labels[docker.LabelCluster] = cluster
	}
	resp, err := dc.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: labels}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func exists(ctx context.Context, dc *client.Client, id string) (bool, error) {
	_, err := dc.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// A. Two clusters (separate etcds) whose nodes have the same id share one
// Docker engine, as two dev clusters on one host do. Neither reaps the
// other's containers, and each still reaps its own orphans.
func TestTwoClustersOnOneEngine(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	cfg1 := testenv.NodeConfig(t)
	cfg2 := testenv.NodeConfig(t)
	cfg2.ID = cfg1.ID
	n1, n2 := testenv.StartNode(t, cfg1), testenv.StartNode(t, cfg2)
	if n1.ClusterID() == "" || n1.ClusterID() == n2.ClusterID() {
		t.Fatalf("cluster ids %q and %q: want two different ones", n1.ClusterID(), n2.ClusterID())
	}
	ctx := ctxT(t, 5*time.Minute)
	sb1 := mkSandbox(t, ctx, n1.Client, "one", true)
	sb2 := mkSandbox(t, ctx, n2.Client, "two", true)

	// Each cluster's own orphan, so the test shows the reaper at work.
	o1 := orphan(t, ctx, dc, cfg1.ID, n1.ClusterID())
	o2 := orphan(t, ctx, dc, cfg2.ID, n2.ClusterID())
	// A container from before the cluster label: neither may reap it,
	// since neither can tell whose it is.
	legacy := orphan(t, ctx, dc, cfg1.ID, "")

	alive := func() {
		t.Helper()
		for _, c := range []struct{ name, id string }{{"one", sb1.Status.ContainerId}, {"two", sb2.Status.ContainerId}, {"unlabelled", legacy}} {
			ok, err := exists(ctx, dc, c.id)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Fatalf("container of %s was removed by a node of another cluster", c.name)
			}
		}
	}
	testenv.Eventually(t, time.Minute, "each node reaps its own orphan", func() (bool, error) {
		alive()
		g1, err := exists(ctx, dc, o1)
		if err != nil {
			return false, err
		}
		g2, err := exists(ctx, dc, o2)
		return !g1 && !g2, err
	})
	if n1.OrphansReaped() != 1 || n2.OrphansReaped() != 1 {
		t.Fatalf("reaped %d and %d orphans; want 1 each", n1.OrphansReaped(), n2.OrphansReaped())
	}
	// Several more resyncs, each well past the grace: still nobody takes
	// the other's container.
	until := time.Now().Add(4 * (cfg1.OrphanGrace + cfg1.Resync))
	for time.Now().Before(until) {
		alive()
		<-time.After(cfg1.Resync) // poll interval
	}
	for _, c := range []struct {
		n    *testenv.Node
		name string
	}{{n1, "one"}, {n2, "two"}} {
		got, err := c.n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: c.name})
		if err != nil || got.Status.Phase != shoalv1.SandboxPhase_READY {
			t.Fatalf("sandbox %s: %v %v", c.name, got, err)
		}
	}
	if n1.OrphansReaped() != 1 || n2.OrphansReaped() != 1 {
		t.Fatalf("reaped %d and %d orphans; want 1 each", n1.OrphansReaped(), n2.OrphansReaped())
	}
}
