package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

// A node whose Docker engine dies (dockerd SIGKILLed) is no black hole:
// after --engine-grace it publishes EngineUnavailable, placement skips it
// with that reason, /readyz fails naming it, its sandboxes are UNKNOWN
// with EngineReachable False, exec through another node fails UNAVAILABLE
// naming the node and its engine, a create placed there just before waits
// instead of going ERROR, and a delete waits with the reason shown. When
// the engine is back every sandbox shows what the engine says, the waiting
// create is provisioned and the delete completes.
func TestDeadEngineIsNodeHealth(t *testing.T) {
	t.Parallel()
	const grace = 6 * time.Second
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Metrics: true,
		Args: []string{"--node-ttl", "2s", "--engine-grace", grace.String()}})
	if !c.SeparateEngines() {
		t.Skip("the nodes share the system engine here; killing it is not this test's to do")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	down := c.ID(0)
	api := c.Client(1) // every call through the other node
	for _, name := range []string{"runs", "goes"} {
		create(t, ctx, api, name, down)
	}

	killed := time.Now()
	if err := c.Engine(0).Kill(); err != nil {
		t.Fatal(err)
	}
	// Placed before the condition is out: it must wait, not go ERROR
	// after its provisioning attempts.
	early, err := api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "early"}, Spec: &shoalv1.SandboxSpec{Node: down}}})
	if err != nil {
		t.Fatalf("create on %s right after its engine died (within --engine-grace): %v", down, err)
	}
	t.Logf("created %s on %s %s after the engine died", early.Meta.Name, down, time.Since(killed).Round(time.Millisecond))

	// The node says so, and placement skips it.
	n := pollNode(t, ctx, c, down, func(n *shoalv1.Node) bool {
		cond := store.NodeCondition(n, store.ConditionEngineUnavailable)
		return cond != nil && cond.Status == "True"
	})
	t.Logf("engine death → EngineUnavailable in node list: %s (grace %s)", time.Since(killed).Round(time.Millisecond), grace)
	if n.Status.GetReady() != true {
		t.Errorf("%s: Ready %v; its lease is held, only its engine is down", down, n.Status.GetReady())
	}
	// `shoal node list` through the built binary shows it in STATUS.
	out, err := exec.CommandContext(ctx, testenv.Binary(t), "node", "list", "--endpoint", c.Addr(1)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Ready,EngineUnavailable") {
		t.Errorf("shoal node list while %s's engine is down: %v\n%s\nwant STATUS Ready,EngineUnavailable", down, err, out)
	}
	cond := store.NodeCondition(n, store.ConditionEngineUnavailable)
	if !strings.Contains(cond.Message, c.Engine(0).Host) {
		t.Errorf("EngineUnavailable message %q does not name the engine %s", cond.Message, c.Engine(0).Host)
	}
	_, err = api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "pinned"}, Spec: &shoalv1.SandboxSpec{Node: down}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "engine unavailable") {
		t.Errorf("create pinned to %s while its engine is down: %v, want FAILED_PRECONDITION naming the engine", down, err)
	}
	for i := range 3 {
		sb, err := api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("free-%d", i)}}})
		if err != nil {
			t.Fatalf("create with no node while %s's engine is down: %v", down, err)
		}
		if sb.Spec.Node != c.ID(1) {
			t.Errorf("free-%d placed on %s, whose engine is down", i, sb.Spec.Node)
		}
	}

	// Its sandboxes are UNKNOWN, saying why.
	sb := pollSandbox(t, ctx, api, "runs", func(sb *shoalv1.Sandbox) bool {
		return sb.Status.Phase == shoalv1.SandboxPhase_UNKNOWN && engineReachable(sb) == "False"
	})
	if !strings.Contains(sb.Status.Message, down) {
		t.Errorf("runs: message %q does not name node %s", sb.Status.Message, down)
	}
	// exec through the other node: UNAVAILABLE naming node and engine.
	stream, err := api.Exec(ctx, &shoalv1.ExecRequest{Name: "runs", Command: []string{"true"}})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), down) || !strings.Contains(err.Error(), "engine") {
		t.Errorf("exec into a sandbox whose engine is down: %v, want UNAVAILABLE naming node %s and its engine", err, down)
	}
	// /readyz: the dead engine's node fails naming the condition.
	if code, body := readyz(t, c.MetricsAddr(0)); code != http.StatusServiceUnavailable || !strings.Contains(body, store.ConditionEngineUnavailable) {
		t.Errorf("/readyz of %s: %d %q, want 503 naming %s", down, code, body, store.ConditionEngineUnavailable)
	}
	if code, body := readyz(t, c.MetricsAddr(1)); code != http.StatusOK {
		t.Errorf("/readyz of %s (its engine is fine): %d %q", c.ID(1), code, body)
	}
	// A delete waits for the engine, the reason shown on the sandbox.
	if _, err := api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "goes"}); err != nil {
		t.Fatalf("delete goes: %v", err)
	}
	pollSandbox(t, ctx, api, "goes", func(sb *shoalv1.Sandbox) bool {
		return sb.Meta.DeletionTimestamp != nil && engineReachable(sb) == "False"
	})
	// The early create waits too: PROVISIONING, not ERROR.
	if sb := pollSandbox(t, ctx, api, "early", func(sb *shoalv1.Sandbox) bool { return engineReachable(sb) == "False" }); sb.Status.Phase != shoalv1.SandboxPhase_PROVISIONING {
		t.Errorf("early: %s (%s) while the engine is down, want PROVISIONING", sb.Status.Phase, sb.Status.Message)
	}

	// The engine comes back.
	if err := c.Engine(0).Revive(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	pollNode(t, ctx, c, down, func(n *shoalv1.Node) bool {
		cond := store.NodeCondition(n, store.ConditionEngineUnavailable)
		return cond != nil && cond.Status == "False"
	})
	t.Logf("engine back → EngineUnavailable False: %s", time.Since(back).Round(time.Millisecond))
	if sb := pollSandbox(t, ctx, api, "early", func(sb *shoalv1.Sandbox) bool {
		return sb.Status.Phase != shoalv1.SandboxPhase_PROVISIONING
	}); sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Errorf("early after the engine came back: %s (%s), want READY", sb.Status.Phase, sb.Status.Message)
	}
	testenv.Eventually(t, time.Minute, "the waiting delete of goes completes once the engine is back", func() (bool, error) {
		_, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "goes"})
		return status.Code(err) == codes.NotFound, err
	})
	t.Logf("engine back → the waiting delete done: %s", time.Since(back).Round(time.Millisecond))
	// "runs" shows what the engine says of its container now.
	sb = pollSandbox(t, ctx, api, "runs", func(sb *shoalv1.Sandbox) bool {
		return sb.Status.Phase != shoalv1.SandboxPhase_UNKNOWN && engineReachable(sb) == "True"
	})
	ci, err := c.Engine(0).Client.ContainerInspect(ctx, sb.Status.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	want := shoalv1.SandboxPhase_STOPPED
	if ci.State.Running {
		want = shoalv1.SandboxPhase_READY
	}
	if sb.Status.Phase != want || !ci.State.Running && int(sb.Status.ExitCode) != ci.State.ExitCode {
		t.Errorf("runs after the engine came back: %s exit %d, the engine says running %v exit %d", sb.Status.Phase, sb.Status.ExitCode, ci.State.Running, ci.State.ExitCode)
	}
	t.Logf("runs after the engine's restart: %s (%s); the engine says running=%v exit=%d", sb.Status.Phase, sb.Status.Message, ci.State.Running, ci.State.ExitCode)
	if !ci.State.Running && !strings.Contains(sb.Status.Message, "when its engine went down or restarted") {
		t.Errorf("runs: STOPPED by the engine's restart, but its message %q does not say so (its command never exited)", sb.Status.Message)
	}
	if code, body := readyz(t, c.MetricsAddr(0)); code != http.StatusOK {
		t.Errorf("/readyz of %s after its engine came back: %d %q", down, code, body)
	}
	// The sandbox's history says it, in order, in the node's words.
	testenv.Eventually(t, 30*time.Second, "runs' events: EngineUnavailable, then EngineAvailable", func() (bool, error) {
		resp, err := api.ListEvents(ctx, &shoalv1.ListEventsRequest{Sandbox: "runs"})
		if err != nil {
			return false, err
		}
		var got []string
		for _, ev := range resp.Items {
			if strings.HasPrefix(ev.Reason, "Engine") {
				got = append(got, ev.Reason+" by "+ev.ReportingNode+": "+ev.Message)
			}
		}
		return len(got) == 2 && strings.HasPrefix(got[0], "EngineUnavailable by "+down+": ") && strings.Contains(got[0], c.Engine(0).Host) &&
			strings.HasPrefix(got[1], "EngineAvailable by "+down), fmt.Errorf("%q", got)
	})
}

func engineReachable(sb *shoalv1.Sandbox) string {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == store.ConditionEngineReachable {
			return c.Status
		}
	}
	return ""
}

func pollNode(t *testing.T, ctx context.Context, c *testenv.Cluster, id string, ok func(*shoalv1.Node) bool) *shoalv1.Node {
	t.Helper()
	var n *shoalv1.Node
	testenv.Eventually(t, time.Minute, "node "+id, func() (bool, error) {
		var err error
		n, err = c.ClusterClient(1).GetNode(ctx, &shoalv1.GetNodeRequest{Name: id})
		return err == nil && ok(n), fmt.Errorf("%v (%v)", n.GetConditions(), err)
	})
	return n
}

func pollSandbox(t *testing.T, ctx context.Context, api shoalv1.ShoalClient, name string, ok func(*shoalv1.Sandbox) bool) *shoalv1.Sandbox {
	t.Helper()
	var sb *shoalv1.Sandbox
	testenv.Eventually(t, time.Minute, "sandbox "+name, func() (bool, error) {
		var err error
		sb, err = api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
		return err == nil && ok(sb), fmt.Errorf("%v (%v)", sb.GetStatus(), err)
	})
	return sb
}

func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz at %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func create(t *testing.T, ctx context.Context, cl shoalv1.ShoalClient, name, node string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := cl.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: node}}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create %s: phase %s (%s), want READY", name, sb.Status.Phase, sb.Status.Message)
	}
	return sb
}
