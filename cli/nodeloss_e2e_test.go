package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/docker"
	"shoal/internal/testenv"
)

// nodeTTL is the liveness lease of the nodes of these tests; the fence
// margin defaults to it.
const nodeTTL = 2 * time.Second

// lossCluster is two nodes, each with its own engine where it can have
// one, with a short node TTL and an orphan grace far longer than any test,
// so that a container removed "at once" cannot have been reaped as an
// orphan.
func lossCluster(t *testing.T) *testenv.Cluster {
	testenv.RequireDocker(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, OrphanGrace: time.Hour,
		Args: []string{"--node-ttl", nodeTTL.String()}})
	if !c.SeparateEngines() {
		t.Log("nodes share one Docker engine here: each node still touches only its own containers (by label)")
	}
	return c
}

// containerOf returns the state of the container of a sandbox uid on a
// node's engine ("" when there is none).
func containerOf(t *testing.T, c *testenv.Cluster, i int, uid string) string {
	t.Helper()
	cs, err := c.Engine(i).Client.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelUID+"="+uid))})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		return ""
	}
	return string(cs[0].State)
}

func getSandbox(t *testing.T, bin, ep, name string) *shoalv1.Sandbox {
	t.Helper()
	r := run(t, bin, ep, "sandbox", "get", name, "-o", "json").must(t, 0, "sandbox get "+name)
	var sb struct {
		Meta   struct{ Uid string }
		Status struct {
			Phase      string
			Node       string
			Conditions []struct{ Type, Status string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil {
		t.Fatalf("sandbox get %s: %v\n%s", name, err, r.stdout)
	}
	out := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Uid: sb.Meta.Uid}, Status: &shoalv1.SandboxStatus{
		Phase: shoalv1.SandboxPhase(shoalv1.SandboxPhase_value[sb.Status.Phase]), Node: sb.Status.Node}}
	for _, c := range sb.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, &shoalv1.Condition{Type: c.Type, Status: c.Status})
	}
	return out
}

func nodeLost(sb *shoalv1.Sandbox) string {
	for _, c := range sb.Status.Conditions {
		if c.Type == "NodeLost" {
			return c.Status
		}
	}
	return ""
}

// e. The owner is killed: its sandboxes go UNKNOWN/NodeLost after its TTL;
// `delete --wait` of one returns within 2×TTL + 5 s through the other node;
// the provider is then deletable; restarted, the node removes that
// container at once and its other sandbox is READY again.
func TestOwnerKilled(t *testing.T) {
	t.Parallel()
	c := lossCluster(t)
	bin := testenv.Binary(t)
	front, owner := c.Addr(0), c.ID(1)
	runWith(t, bin, front, runOpts{env: []string{"NVIDIA_API_KEY=nvapi-loss-secret"}},
		"provider", "create", "p", "--type", "nvidia", "--credential-from-env", "NVIDIA_API_KEY").must(t, 0, "provider create")
	run(t, bin, front, "sandbox", "create", "gone", "--node", owner, "--provider", "p", "--wait").must(t, 0, "create gone")
	run(t, bin, front, "sandbox", "create", "kept", "--node", owner, "--wait").must(t, 0, "create kept")
	gone, kept := getSandbox(t, bin, front, "gone"), getSandbox(t, bin, front, "kept")
	if containerOf(t, c, 1, gone.Meta.Uid) != "running" {
		t.Fatal("the sandbox's container does not run on its owner's engine")
	}

	killed := time.Now()
	c.Kill(1)
	testenv.Eventually(t, nodeTTL+10*time.Second, "sandboxes UNKNOWN with NodeLost", func() (bool, error) {
		for _, name := range []string{"gone", "kept"} {
			sb := getSandbox(t, bin, front, name)
			if sb.Status.Phase != shoalv1.SandboxPhase_UNKNOWN || nodeLost(sb) != "True" {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("UNKNOWN %s after the kill", time.Since(killed).Round(time.Millisecond))
	r := run(t, bin, front, "node", "get", owner, "-o", "json").must(t, 0, "node get")
	if !strings.Contains(r.stdout, `"last_seen"`) {
		t.Fatalf("a NotReady node shows no last_seen: %s", r.stdout)
	}

	run(t, bin, front, "sandbox", "delete", "gone", "--wait").must(t, 0, "delete --wait of a lost node's sandbox")
	took := time.Since(killed)
	t.Logf("owner SIGKILL → delete --wait done: %s", took.Round(time.Millisecond))
	if limit := 2*nodeTTL + 5*time.Second; took > limit {
		t.Fatalf("delete --wait of a lost node's sandbox took %s after the kill; want at most %s", took, limit)
	}
	run(t, bin, front, "provider", "delete", "p").must(t, 0, "provider delete after the delete")
	if containerOf(t, c, 1, gone.Meta.Uid) == "" {
		t.Fatal("the dead node's container vanished by itself: only its own node may remove it")
	}

	c.Restart(1)
	c.WaitReady(1)
	testenv.Eventually(t, 20*time.Second, "the deleted sandbox's container removed at once", func() (bool, error) {
		return containerOf(t, c, 1, gone.Meta.Uid) == "", nil
	})
	testenv.Eventually(t, 30*time.Second, "kept READY again, NodeLost False", func() (bool, error) {
		sb := getSandbox(t, bin, front, "kept")
		return sb.Status.Phase == shoalv1.SandboxPhase_READY && nodeLost(sb) == "False", nil
	})
	if containerOf(t, c, 1, kept.Meta.Uid) != "running" {
		t.Fatal("kept's container does not run after the node came back")
	}
}

// f. The owner is cut off from etcd: it freezes its containers within
// TTL + 2 s; a sandbox deleted meanwhile completes through the other node;
// healed, the node removes that container and thaws the other, READY.
func TestOwnerCutOff(t *testing.T) {
	t.Parallel()
	c := lossCluster(t)
	bin := testenv.Binary(t)
	front, owner := c.Addr(0), c.ID(1)
	run(t, bin, front, "sandbox", "create", "gone", "--node", owner, "--wait").must(t, 0, "create gone")
	run(t, bin, front, "sandbox", "create", "kept", "--node", owner, "--wait").must(t, 0, "create kept")
	gone, kept := getSandbox(t, bin, front, "gone"), getSandbox(t, bin, front, "kept")

	cut := time.Now()
	c.CutOff(1)
	testenv.Eventually(t, nodeTTL+5*time.Second, "the cut-off node's containers paused", func() (bool, error) {
		return containerOf(t, c, 1, gone.Meta.Uid) == "paused" && containerOf(t, c, 1, kept.Meta.Uid) == "paused", nil
	})
	frozen := time.Since(cut)
	t.Logf("cut off → containers paused: %s", frozen.Round(time.Millisecond))
	if limit := nodeTTL + 2*time.Second; frozen > limit {
		t.Fatalf("containers paused %s after the cut; want within %s of the last renewal", frozen, limit)
	}
	// The cut-off node refuses calls at once, marked not-applied, and a
	// client listing it first moves on to the next node, writes included.
	r := run(t, bin, c.Addr(1), "sandbox", "list").must(t, cli.ExitUnavailable, "list through the cut-off node")
	if !strings.Contains(r.stderr, "cannot reach etcd") || !strings.Contains(r.stderr, c.ID(1)) {
		t.Fatalf("the cut-off node's refusal does not say why: %s", r.stderr)
	}
	both := c.Addr(1) + "," + front
	run(t, bin, both, "sandbox", "get", "kept").must(t, 0, "get with the cut-off node listed first")
	run(t, bin, both, "sandbox", "label", "kept", "seen=cut").must(t, 0, "a write with the cut-off node listed first")
	run(t, bin, both, "sandbox", "delete", "gone", "--wait").must(t, 0, "delete --wait while the owner is cut off")
	run(t, bin, front, "sandbox", "get", "gone").must(t, cli.ExitNotFound, "deleted sandbox")
	if getSandbox(t, bin, front, "kept").Status.Phase != shoalv1.SandboxPhase_UNKNOWN {
		t.Fatal("the cut-off node's sandbox is not UNKNOWN")
	}

	c.Heal(1)
	testenv.Eventually(t, 30*time.Second, "deleted container removed, kept thawed and READY", func() (bool, error) {
		sb := getSandbox(t, bin, front, "kept")
		return containerOf(t, c, 1, gone.Meta.Uid) == "" && containerOf(t, c, 1, kept.Meta.Uid) == "running" &&
			sb.Status.Phase == shoalv1.SandboxPhase_READY, nil
	})
	run(t, bin, front, "sandbox", "exec", "kept", "--", "true").must(t, 0, "exec in the thawed sandbox")

	// The histories say so: what the cut-off node did while it could not
	// write (Frozen) arrives once it is back, in its place.
	testenv.Eventually(t, 30*time.Second, "the cut-off node's events written", func() (bool, error) {
		kept := listEvents(t, bin, front, "sandbox", "events", "kept")
		gone := listEvents(t, bin, front, "sandbox", "events", "gone")
		// (The node's own freeze is never a Paused nor an Unpaused.)
		ok := slices.Equal(only(kept, "Frozen", "Thawed", "Paused", "Unpaused"), []string{"Frozen", "Thawed"}) &&
			slices.Equal(only(kept, "NodeLost", "Fenced", "NodeReady"), []string{"NodeLost", "Fenced", "NodeReady"}) &&
			slices.Equal(only(gone, "Frozen", "DeleteRequested", "Removed", "TornDown"), []string{"Frozen", "DeleteRequested", "Removed", "TornDown"})
		return ok, fmt.Errorf("kept: %v; gone: %v", reasons(kept), reasons(gone))
	})
}

// drain cordons and waits (--delete deletes); remove refuses a Ready
// node and forgets a NotReady one once its sandboxes are deleted.
func TestNodeDrainAndRemove(t *testing.T) {
	t.Parallel()
	c := lossCluster(t)
	bin := testenv.Binary(t)
	front, victim := c.Addr(0), c.ID(1)
	for _, name := range []string{"d1", "d2"} {
		run(t, bin, front, "sandbox", "create", name, "--node", victim).must(t, 0, "create "+name)
	}
	r := run(t, bin, front, "node", "drain", victim, "--timeout", "2s").must(t, cli.ExitUnavailable, "drain without --delete times out")
	if !strings.Contains(r.stderr, "still holds 2 sandbox(es)") || !strings.Contains(r.stderr, "default/d1") {
		t.Fatalf("drain timeout does not say what is left: %s", r.stderr)
	}
	run(t, bin, front, "sandbox", "create", "d3", "--node", victim).must(t, cli.ExitPrecondition, "create on a cordoned node")
	r = run(t, bin, front, "node", "drain", victim, "--delete", "--timeout", "1m").must(t, 0, "drain --delete")
	if !strings.Contains(r.stdout, "drained") {
		t.Fatalf("drain: %s", r.stdout)
	}
	for _, name := range []string{"d1", "d2"} {
		run(t, bin, front, "sandbox", "get", name).must(t, cli.ExitNotFound, "drained sandbox "+name)
	}
	r = run(t, bin, front, "node", "list").must(t, 0, "node list")
	if !strings.Contains(r.stdout, "Ready,Cordoned") {
		t.Fatalf("a drained node is not listed cordoned:\n%s", r.stdout)
	}

	r = run(t, bin, front, "node", "remove", victim).must(t, cli.ExitPrecondition, "remove a Ready node")
	if !strings.Contains(r.stderr, "Ready") {
		t.Fatalf("remove of a Ready node: %s", r.stderr)
	}
	run(t, bin, front, "node", "uncordon", victim).must(t, 0, "uncordon")
	run(t, bin, front, "sandbox", "create", "left", "--node", victim, "--wait").must(t, 0, "create left")
	c.Kill(1)
	testenv.Eventually(t, nodeTTL+10*time.Second, "victim NotReady", func() (bool, error) {
		r := run(t, bin, front, "node", "get", victim)
		return strings.Contains(r.stdout, "NotReady"), nil
	})
	r = run(t, bin, front, "node", "remove", victim).must(t, 0, "remove a NotReady node")
	if !strings.Contains(r.stdout, "default/left") {
		t.Fatalf("remove does not name the sandbox it deletes: %s", r.stdout)
	}
	testenv.Eventually(t, 2*nodeTTL+15*time.Second, "node forgotten and its sandbox deleted", func() (bool, error) {
		return run(t, bin, front, "node", "get", victim).code == cli.ExitNotFound &&
			run(t, bin, front, "sandbox", "get", "left").code == cli.ExitNotFound, nil
	})
	run(t, bin, front, "node", "remove", victim).must(t, cli.ExitNotFound, "remove a forgotten node")
}

// An exec of a sandbox on node 1, asked of node 0 (which relays it), when
// node 1 is SIGKILLed: the client's error names node 1, the owner that went
// away, not node 0, which it dialed. Docker runs the exec on with nobody
// attached; restarted, node 1 kills it and its process group, and logs
// that it did; the sandbox's own command runs on.
func TestExecThroughAnotherNodeEndsWithItsOwner(t *testing.T) {
	t.Parallel()
	c := lossCluster(t)
	bin := testenv.Binary(t)
	front, owner := c.Addr(0), c.ID(1)
	run(t, bin, front, "sandbox", "create", "long", "--node", owner, "--wait").must(t, 0, "create long")
	id := containerID(t, c, 1, getSandbox(t, bin, front, "long").Meta.Uid)

	done := runAsync(t, bin, front, "sandbox", "exec", "long", "--", "sh", "-c", "sleep 4711 & sleep 4712")
	testenv.Eventually(t, 30*time.Second, "the exec runs in the owner's container", func() (bool, error) {
		ps := psIn(t, c, 1, id)
		return strings.Contains(ps, "sleep 4711") && strings.Contains(ps, "sleep 4712"), fmt.Errorf("ps:\n%s", ps)
	})
	c.Kill(1)
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the exec through node 0 did not end within a minute of its owner's kill")
	}
	r.must(t, cli.ExitUnavailable, "exec whose owner was killed")
	want := fmt.Sprintf("owner node %s went away during the exec (served by node %s)", owner, c.ID(0))
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "shoal node get "+owner) {
		t.Fatalf("the exec's error does not name the owner that went away; want %q in:\n%s", want, r.stderr)
	}
	t.Logf("the client's error:\n%s", r.stderr)
	// Docker does not end an exec whose caller went away.
	if ps := psIn(t, c, 1, id); !strings.Contains(ps, "sleep 4712") {
		t.Fatalf("the exec ended with its node, not with its restart; ps:\n%s", ps)
	}

	c.Restart(1)
	back := time.Now()
	testenv.Eventually(t, 30*time.Second, "the restarted owner killed the exec and its process group", func() (bool, error) {
		ps := psIn(t, c, 1, id)
		return !strings.Contains(ps, "sleep 4711") && !strings.Contains(ps, "sleep 4712"), fmt.Errorf("ps:\n%s", ps)
	})
	t.Logf("owner serving again → exec reaped: %s", time.Since(back).Round(time.Millisecond))
	if ps := psIn(t, c, 1, id); !strings.Contains(ps, "sleep 3600") || containerOf(t, c, 1, getSandbox(t, bin, front, "long").Meta.Uid) != "running" {
		t.Fatalf("the sandbox's own command was touched; ps:\n%s", ps)
	}
	log, err := os.ReadFile(c.LogPath(1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "killed an exec an earlier run of this node left running") {
		t.Fatalf("the restarted node did not log the exec it killed; log:\n%s", log)
	}
	run(t, bin, front, "sandbox", "exec", "long", "--", "true").must(t, 0, "exec through node 0 after the owner is back")
}

// containerID is the id of the container of a sandbox uid on node i's
// engine.
func containerID(t *testing.T, c *testenv.Cluster, i int, uid string) string {
	t.Helper()
	cs, err := c.Engine(i).Client.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelUID+"="+uid))})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("%d containers of sandbox %s on node %d's engine, want 1", len(cs), uid, i)
	}
	return cs[0].ID
}

// psIn lists the processes of a container, asking node i's engine itself
// (no shoal node in between).
func psIn(t *testing.T, c *testenv.Cluster, i int, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc := c.Engine(i).Client
	ex, err := dc.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"ps", "-o", "pid,ppid,pgid,args"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	att, err := dc.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
