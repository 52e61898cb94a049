package apiserver_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
	if _, err := dc.ContainerInspect(ctx, id); !client.IsErrNotFound(err) {
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
