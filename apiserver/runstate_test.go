package apiserver_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

func condOf(sb *shoalv1.Sandbox, typ string) *shoalv1.Condition {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == typ {
			return c
		}
	}
	return nil
}

func containerRunning(t *testing.T, ctx context.Context, dc *client.Client, id string) bool {
	t.Helper()
	ci, err := dc.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return ci.State.Running
}

// Stop and start against a real node and engine: the container is kept
// (same id, files intact), the phases and conditions say what happened,
// repeated requests are no-ops that succeed, a stale --if-version is
// refused, and a stop wins against a stream of concurrent label writes
// without ever failing with a conflict.
func TestStopStartKeepsTheContainer(t *testing.T) {
	dc := testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	sb := readySandbox(t, ctx, c, "ss")
	id := sb.Status.ContainerId
	if r, err := execAll(ctx, c, "ss", "sh", "-c", "echo kept > /root/file"); err != nil || r.code != 0 {
		t.Fatalf("write a file: %v %d %s", err, r.code, r.stderr)
	}

	// Label writers race the stop: the stop never fails and the labels
	// all land.
	var wg sync.WaitGroup
	lctx, stopLabels := context.WithCancel(ctx)
	labelErrs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; lctx.Err() == nil; i++ {
			_, err := c.UpdateSandbox(lctx, &shoalv1.UpdateSandboxRequest{Name: "ss", SetLabels: map[string]string{"n": strings.Repeat("x", i%5+1)}})
			if err != nil && lctx.Err() == nil {
				labelErrs <- err
				return
			}
		}
	}()
	stopped, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "ss", Wait: true, Grace: durationpb.New(5 * time.Second)})
	stopLabels()
	wg.Wait()
	close(labelErrs)
	if err != nil {
		t.Fatalf("stop --wait under label writes: %v", err)
	}
	if err := <-labelErrs; err != nil {
		t.Fatalf("a label write failed during the stop: %v", err)
	}
	if ph := stopped.Status.Phase; ph != shoalv1.SandboxPhase_STOPPED {
		t.Fatalf("after stop --wait: phase %s (%s), want STOPPED", ph, stopped.Status.Message)
	}
	if cond := condOf(stopped, "Stopped"); cond == nil || cond.Status != "True" || cond.Reason != "StopRequested" {
		t.Fatalf("condition Stopped after a stop: %+v", cond)
	}
	if stopped.Status.ContainerId != id || containerRunning(t, ctx, dc, id) {
		t.Fatalf("after stop: container %s (was %s) running %v", stopped.Status.ContainerId, id, containerRunning(t, ctx, dc, id))
	}
	if stopped.Spec.RunState != shoalv1.RunState_RUN_STATE_STOPPED || stopped.Status.ObservedRunGeneration != stopped.Spec.RunGeneration {
		t.Fatalf("run state %s gen %d observed %d", stopped.Spec.RunState, stopped.Spec.RunGeneration, stopped.Status.ObservedRunGeneration)
	}

	// Exec into a stopped sandbox: refused, naming the way out.
	if _, err := execAll(ctx, c, "ss", "true"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "sandbox start") {
		t.Fatalf("exec into a stopped sandbox: %v", err)
	}

	// A second stop changes nothing. (The label writers' last write may
	// have landed after the stop returned: compare with what is there.)
	stopped, err = c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "ss"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "ss", Wait: true})
	if err != nil || again.Meta.ResourceVersion != stopped.Meta.ResourceVersion {
		t.Fatalf("stop of a stopped sandbox: %v (version %d, was %d)", err, again.GetMeta().GetResourceVersion(), stopped.Meta.ResourceVersion)
	}

	// A start at a stale version is refused and writes nothing.
	if _, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "ss", ResourceVersion: stopped.Meta.ResourceVersion - 1}); status.Code(err) != codes.Aborted && status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("start at a stale version: %v", err)
	}
	started, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "ss", Wait: true, ResourceVersion: stopped.Meta.ResourceVersion})
	if err != nil {
		t.Fatalf("start --wait: %v", err)
	}
	if started.Status.Phase != shoalv1.SandboxPhase_READY || started.Status.ContainerId != id || !containerRunning(t, ctx, dc, id) {
		t.Fatalf("after start: phase %s container %s (was %s)", started.Status.Phase, started.Status.ContainerId, id)
	}
	if cond := condOf(started, "Stopped"); cond == nil || cond.Status != "False" {
		t.Fatalf("condition Stopped after a start: %+v", cond)
	}
	if r, err := execAll(ctx, c, "ss", "cat", "/root/file"); err != nil || string(r.stdout) != "kept\n" {
		t.Fatalf("the file after stop and start: %q %v", r.stdout, err)
	}
	// A start of a running sandbox changes nothing.
	if again, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "ss", Wait: true}); err != nil || again.Meta.ResourceVersion != started.Meta.ResourceVersion {
		t.Fatalf("start of a READY sandbox: %v", err)
	}

	// Bad input names the field and writes nothing.
	for _, req := range []*shoalv1.StopSandboxRequest{
		{Name: "ss", Grace: durationpb.New(-time.Second)},
		{Name: "ss", Grace: durationpb.New(2 * time.Hour)},
	} {
		if _, err := c.StopSandbox(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "grace") {
			t.Fatalf("stop with grace %s: %v", req.Grace.AsDuration(), err)
		}
	}
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("stop of a missing sandbox: %v", err)
	}
	if cur, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "ss"}); err != nil || cur.Spec.RunState == shoalv1.RunState_RUN_STATE_STOPPED {
		t.Fatalf("a refused stop wrote: %v %v", err, cur.GetSpec().GetRunState())
	}

	// Delete from STOPPED removes the container.
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "ss", Wait: true, Grace: durationpb.New(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "ss", Wait: true}); err != nil {
		t.Fatalf("delete of a stopped sandbox: %v", err)
	}
	if _, err := dc.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container of a deleted stopped sandbox: %v", err)
	}
}

// A command that exits by itself is STOPPED with the condition Stopped,
// reason CommandExited; start runs it again; a sandbox created with a
// run state or generation is refused naming the field.
func TestStartRunsAnExitedCommandAgain(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "once"},
		Spec: &shoalv1.SandboxSpec{Command: []string{"sh", "-c", "echo run; exit 3"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_STOPPED || sb.Status.ExitCode != 3 {
		t.Fatalf("created: %s code %d", sb.Status.Phase, sb.Status.ExitCode)
	}
	testenv.Eventually(t, 30*time.Second, "the condition Stopped says CommandExited", func() error {
		cur, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "once"})
		if err != nil {
			return err
		}
		if cond := condOf(cur, "Stopped"); cond == nil || cond.Reason != "CommandExited" {
			return status.Errorf(codes.Unknown, "condition Stopped: %+v", cond)
		}
		return nil
	})
	again, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "once", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.Status.Phase != shoalv1.SandboxPhase_STOPPED || again.Status.ExitCode != 3 || again.Status.ContainerId != sb.Status.ContainerId {
		t.Fatalf("started again: %s code %d container %s", again.Status.Phase, again.Status.ExitCode, again.Status.ContainerId)
	}
	// Ran twice in the same container: its log has both runs.
	logs, err := c.Logs(ctx, &shoalv1.LogsRequest{Name: "once"})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		ch, err := logs.Recv()
		if err != nil {
			break
		}
		out = append(out, ch.Data...)
	}
	if got := strings.Count(string(out), "run\n"); got != 2 {
		t.Fatalf("the command ran %d times (log %q), want 2", got, out)
	}

	for _, tc := range []struct {
		spec  *shoalv1.SandboxSpec
		field string
	}{
		{&shoalv1.SandboxSpec{RunState: shoalv1.RunState_RUN_STATE_STOPPED}, "sandbox.spec.run_state"},
		{&shoalv1.SandboxSpec{RunGeneration: 4}, "sandbox.spec.run_generation"},
		{&shoalv1.SandboxSpec{StopGrace: durationpb.New(-1)}, "sandbox.spec.stop_grace"},
	} {
		_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "bad"}, Spec: tc.spec}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("create with %v: %v, want INVALID_ARGUMENT naming %s", tc.spec, err, tc.field)
		}
	}
}

// A stop's grace (up to an hour) holds nothing up: a second stop with a
// shorter grace cuts it short, a delete does not wait for it, a start
// waits only for the stop to end; the agent's other work goes on. The
// command ignores SIGTERM, so each stop would last its whole grace.
func TestLongStopsHoldNothingUp(t *testing.T) {
	dc := testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	deaf := []string{"sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"}
	create := func(name string) *shoalv1.Sandbox {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Command: deaf}}})
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			t.Fatalf("create %s: %v %v", name, err, sb.GetStatus().GetPhase())
		}
		return sb
	}
	hour := durationpb.New(time.Hour)
	// Each wait below must end long before the hour's grace: a minute.
	within := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Minute) }

	// A shorter grace cuts a stop in progress short.
	create("a")
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "a", Grace: hour}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "a STOPPING", func() (bool, error) {
		sb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "a"})
		return sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_STOPPING, err
	})
	wctx, cancel := within()
	sb, err := c.StopSandbox(wctx, &shoalv1.StopSandboxRequest{Name: "a", Grace: durationpb.New(0), Wait: true})
	cancel()
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_STOPPED || sb.Status.ExitCode != 137 {
		t.Fatalf("a stop with grace 0 during a stop with grace 1h: %v %v code %d", err, sb.GetStatus().GetPhase(), sb.GetStatus().GetExitCode())
	}

	// Meanwhile the node does other work: a sandbox is created and
	// deleted while b's stop waits out its grace.
	create("b")
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "b", Grace: hour}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = within()
	other, err := c.CreateSandbox(wctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "other"}}})
	cancel()
	if err != nil || other.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create during a long stop: %v %v", err, other.GetStatus().GetPhase())
	}
	// A delete does not wait for the stop.
	bsb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel = within()
	_, err = c.DeleteSandbox(wctx, &shoalv1.DeleteSandboxRequest{Name: "b", Wait: true})
	cancel()
	if err != nil {
		t.Fatalf("delete during a stop with grace 1h: %v", err)
	}
	if _, err := dc.ContainerInspect(ctx, bsb.Status.ContainerId); err == nil {
		t.Fatal("b's container outlived its deletion")
	}

	// A start during a stop waits for the stop to end, then starts the
	// same container again.
	d := create("d")
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "d", Grace: durationpb.New(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = within()
	started, err := c.StartSandbox(wctx, &shoalv1.StartSandboxRequest{Name: "d", Wait: true})
	cancel()
	if err != nil || started.Status.Phase != shoalv1.SandboxPhase_READY || started.Status.ContainerId != d.Status.ContainerId ||
		!containerRunning(t, ctx, dc, d.Status.ContainerId) {
		t.Fatalf("start during a stop: %v %v", err, started.GetStatus().GetPhase())
	}
}

// A sandbox stopped before its container was made gets a container that
// never ran: STOPPED, saying so, until a start runs it. Restart's start
// applies only at the run generation its stop returned, whatever labels
// were written in between.
func TestStoppedBeforeItsContainer(t *testing.T) {
	dc := testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	// Written to the store as a stop landing before the agent provisions
	// would leave it (the API refuses a run state at create).
	if _, err := n.Store().CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "early"},
		Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Node: n.Config.ID, RunState: shoalv1.RunState_RUN_STATE_STOPPED, RunGeneration: 1}}); err != nil {
		t.Fatal(err)
	}
	var sb *shoalv1.Sandbox
	testenv.Eventually(t, 30*time.Second, "the early-stopped sandbox STOPPED", func() (bool, error) {
		var err error
		sb, err = c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "early"})
		return err == nil && sb.Status.Phase == shoalv1.SandboxPhase_STOPPED && sb.RunStateReached(), err
	})
	if !strings.Contains(sb.Status.Message, "before its container first started") {
		t.Fatalf("message %q", sb.Status.Message)
	}
	ci, err := dc.ContainerInspect(ctx, sb.Status.ContainerId)
	if err != nil || ci.State.Status != "created" {
		t.Fatalf("the container of a sandbox stopped before it was made: %v %v", err, ci.State)
	}
	// A label between the stop and the start does not stop the start;
	// another run state request does.
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "early", SetLabels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "early", RunGeneration: sb.Spec.RunGeneration + 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("start at another run generation: %v", err)
	}
	started, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "early", Wait: true, RunGeneration: sb.Spec.RunGeneration})
	if err != nil || started.Status.Phase != shoalv1.SandboxPhase_READY || started.Status.ContainerId != sb.Status.ContainerId {
		t.Fatalf("start of a never-started container: %v %v", err, started.GetStatus().GetPhase())
	}
}
