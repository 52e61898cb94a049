package openshellapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

// The streaming methods against two nodes on the host's Docker engine:
// each sandbox is placed on node 1, and every OpenShell call goes to node
// 0, which does not own it and reaches the container only through shoal's
// forwarding.

type streamNodes struct {
	owner *testenv.Node               // owns every sandbox made by sandbox
	front openshellv1.OpenShellClient // node 0's OpenShell API
}

func startStreamNodes(t *testing.T) *streamNodes {
	t.Helper()
	testenv.RequireDocker(t)
	n0 := testenv.StartNode(t, testenv.NodeConfig(t))
	cfg := testenv.NodeConfig(t)
	cfg.ID += "-b"
	cfg.EtcdEndpoints = []string{n0.EtcdEndpoint()}
	n1 := testenv.StartNodes(t, cfg)[0]
	tr, err := n0.Config.TLS.Transport()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(n0.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &streamNodes{owner: n1, front: openshellv1.NewOpenShellClient(conn)}
}

// sandbox makes a READY sandbox running cmd on the owner and returns its
// id (uid).
func (c *streamNodes) sandbox(t *testing.T, ctx context.Context, name string, cmd ...string) string {
	t.Helper()
	sb, err := c.owner.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name},
		Spec: &shoalv1.SandboxSpec{Node: c.owner.Config.ID, Command: cmd},
	}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create %s: %v %v", name, sb.GetStatus(), err)
	}
	return sb.Meta.Uid
}

func streamCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantStatus(t *testing.T, what string, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("%s: %v, want %s saying %q", what, err, code, contains)
	}
}

// execResult is what an exec stream brought: the output, how many stderr
// events, the exit events' codes and the stream's end.
type execResult struct {
	stdout, stderr string
	stderrEvents   int
	exits          []int32
	err            error
}

type execStream interface {
	Recv() (*openshellv1.ExecSandboxEvent, error)
}

func drain(st execStream) execResult {
	var r execResult
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if len(r.exits) > 0 {
			r.err = fmt.Errorf("an event after the exit: %v", ev)
			return r
		}
		switch p := ev.Payload.(type) {
		case *openshellv1.ExecSandboxEvent_Stdout:
			r.stdout += string(p.Stdout.Data)
		case *openshellv1.ExecSandboxEvent_Stderr:
			r.stderr += string(p.Stderr.Data)
			r.stderrEvents++
		case *openshellv1.ExecSandboxEvent_Exit:
			r.exits = append(r.exits, p.Exit.ExitCode)
		}
	}
}

func (c *streamNodes) exec(ctx context.Context, req *openshellv1.ExecSandboxRequest) execResult {
	st, err := c.front.ExecSandbox(ctx, req)
	if err != nil {
		return execResult{err: err}
	}
	return drain(st)
}

func wantExit(t *testing.T, what string, r execResult, code int32) {
	t.Helper()
	if r.err != nil || len(r.exits) != 1 || r.exits[0] != code {
		t.Fatalf("%s: exits %v (want exactly one, %d), err %v; stdout %q stderr %q", what, r.exits, code, r.err, r.stdout, r.stderr)
	}
}

// ExecSandbox through a non-owner: output and exactly one exit event, exit
// codes, stderr only when the command writes it, stdin then EOF, workdir
// and environment, the timeout's 124; bad input INVALID_ARGUMENT naming
// OpenShell's field, an unknown id NOT_FOUND, a sandbox whose command
// exited FAILED_PRECONDITION.
func TestExecSandbox(t *testing.T) {
	t.Parallel()
	c := startStreamNodes(t)
	ctx := streamCtx(t, 3*time.Minute)
	id := c.sandbox(t, ctx, "ex", "sleep", "3600")

	r := c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"echo", "out"}})
	wantExit(t, "echo", r, 0)
	if r.stdout != "out\n" || r.stderrEvents != 0 {
		t.Fatalf("echo: stdout %q, %d stderr events (%q)", r.stdout, r.stderrEvents, r.stderr)
	}
	r = c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sh", "-c", "echo oops >&2; exit 3"}})
	wantExit(t, "exit 3", r, 3)
	if r.stderr != "oops\n" || r.stdout != "" {
		t.Fatalf("exit 3: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"cat"}, Stdin: []byte("from stdin")})
	wantExit(t, "cat", r, 0)
	if r.stdout != "from stdin" {
		t.Fatalf("cat: %q", r.stdout)
	}
	r = c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sh", "-c", "echo $GREETING; pwd"},
		Environment: map[string]string{"GREETING": "hi"}, Workdir: "/tmp"})
	wantExit(t, "env and workdir", r, 0)
	if r.stdout != "hi\n/tmp\n" {
		t.Fatalf("env and workdir: %q", r.stdout)
	}
	start := time.Now()
	r = c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sleep", "60"}, TimeoutSeconds: 1})
	wantExit(t, "timeout", r, 124)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("a 1s timeout took %s", d)
	}

	for _, tc := range []struct {
		name     string
		req      *openshellv1.ExecSandboxRequest
		code     codes.Code
		contains string
	}{
		{"no command", &openshellv1.ExecSandboxRequest{SandboxId: id}, codes.InvalidArgument, "command"},
		{"env key with a dash", &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"A-B": "x"}}, codes.InvalidArgument, "environment"},
		{"env key with a digit first", &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"1A": "x"}}, codes.InvalidArgument, "environment"},
		{"relative workdir", &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Workdir: "tmp"}, codes.InvalidArgument, "workdir"},
		{"no id", &openshellv1.ExecSandboxRequest{Command: []string{"true"}}, codes.InvalidArgument, "sandbox_id"},
		{"unknown id", &openshellv1.ExecSandboxRequest{SandboxId: "00000000-0000-4000-8000-000000000000", Command: []string{"true"}}, codes.NotFound, "00000000-0000-4000-8000-000000000000"},
	} {
		r := c.exec(ctx, tc.req)
		wantStatus(t, tc.name, r.err, tc.code, tc.contains)
		if len(r.exits) != 0 {
			t.Fatalf("%s: ran (%v)", tc.name, r.exits)
		}
	}

	// A sandbox whose command exited is not READY.
	done := c.sandbox(t, ctx, "ex-done", "sh", "-c", "sleep 1")
	testenv.Eventually(t, time.Minute, "ex-done's command exits", func() (bool, error) {
		sb, err := c.owner.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "ex-done"})
		return err == nil && sb.Status.Phase != shoalv1.SandboxPhase_READY, err
	})
	r = c.exec(ctx, &openshellv1.ExecSandboxRequest{SandboxId: done, Command: []string{"true"}})
	wantStatus(t, "exec in an exited sandbox", r.err, codes.FailedPrecondition, "ex-done")
}

// ExecSandboxInteractive through a non-owner: the first message must be
// start; a terminal session computes 6*7 and exits 3; without a terminal,
// stdin ends at the half-close.
func TestExecSandboxInteractive(t *testing.T) {
	t.Parallel()
	c := startStreamNodes(t)
	ctx := streamCtx(t, 3*time.Minute)
	id := c.sandbox(t, ctx, "iex", "sleep", "3600")
	stdin := func(s string) *openshellv1.ExecSandboxInput {
		return &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte(s)}}
	}
	startMsg := func(r *openshellv1.ExecSandboxRequest) *openshellv1.ExecSandboxInput {
		return &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: r}}
	}

	// Not start first.
	st, err := c.front.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(stdin("x")); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "stdin first", drain(st).err, codes.InvalidArgument, "start")

	// A terminal: the shell's echo and prompt come through, then 42, then
	// exit 3.
	st, err = c.front.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*openshellv1.ExecSandboxInput{
		startMsg(&openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sh"}, Tty: true, Cols: 80, Rows: 24}),
		{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: 100, Rows: 30}}},
		stdin("echo $((6*7))\n"),
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "42") {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("before 42 (got %q): %v", out.String(), err)
		}
		if ev.GetStderr() != nil {
			t.Fatalf("a terminal has one stream; got stderr %q", ev.GetStderr().Data)
		}
		if ev.GetExit() != nil {
			t.Fatalf("exited before 42 (got %q): %d", out.String(), ev.GetExit().ExitCode)
		}
		out.Write(ev.GetStdout().GetData())
	}
	if err := st.Send(stdin("exit 3\n")); err != nil {
		t.Fatal(err)
	}
	wantExit(t, "tty exit 3", drain(st), 3)

	// No terminal: cat echoes stdin until the half-close; start's own
	// stdin bytes come first.
	st, err = c.front.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*openshellv1.ExecSandboxInput{
		startMsg(&openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"cat"}, Stdin: []byte("one ")}),
		stdin("two"),
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	r := drain(st)
	wantExit(t, "cat", r, 0)
	if r.stdout != "one two" || r.stderrEvents != 0 {
		t.Fatalf("cat: %q, %d stderr events", r.stdout, r.stderrEvents)
	}

	// A second start.
	st, err = c.front.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(startMsg(&openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"cat"}}))
	_ = st.Send(startMsg(&openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"cat"}}))
	wantStatus(t, "start twice", drain(st).err, codes.InvalidArgument, "start")
}

// watchAll reads a watch until it ends, calling each for every message
// (it may act on the sandbox); it returns the messages and the end.
func watchAll(st openshellv1.OpenShell_WatchSandboxClient, each func(*openshellv1.SandboxStreamEvent)) ([]*openshellv1.SandboxStreamEvent, error) {
	var got []*openshellv1.SandboxStreamEvent
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, ev)
		if each != nil {
			each(ev)
		}
	}
}

// WatchSandbox through a non-owner: the current sandbox first, then its
// log lines, its events, its changes (a label, a stop), until its removal
// ends the stream OK; stop_on_terminal ends it at READY; an unknown id is
// NOT_FOUND.
func TestWatchSandbox(t *testing.T) {
	t.Parallel()
	c := startStreamNodes(t)
	ctx := streamCtx(t, 3*time.Minute)
	id := c.sandbox(t, ctx, "wa", "sh", "-c", "echo hello-log; echo warn-log >&2; exec sleep 3600")

	st, err := c.front.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: id, FollowStatus: true, FollowLogs: true, FollowEvents: true, EventTail: 20})
	if err != nil {
		t.Fatal(err)
	}
	var labeled, stopped, deleting bool
	var logs []string
	reasons := map[string]bool{}
	got, err := watchAll(st, func(ev *openshellv1.SandboxStreamEvent) {
		defer func() {
			if !labeled && len(logs) >= 2 {
				// Both lines are in: change the sandbox.
				labeled = true
				if _, err := c.owner.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "wa", SetLabels: map[string]string{"seen": "yes"}}); err != nil {
					t.Error(err)
				}
			}
		}()
		switch p := ev.Payload.(type) {
		case *openshellv1.SandboxStreamEvent_Log:
			logs = append(logs, p.Log.Fields["stream"]+":"+p.Log.Message)
			if p.Log.SandboxId != id || p.Log.Source != "sandbox" {
				t.Errorf("log line %v", p.Log)
			}
		case *openshellv1.SandboxStreamEvent_Event:
			reasons[p.Event.Reason] = true
		case *openshellv1.SandboxStreamEvent_Sandbox:
			sb := p.Sandbox
			if sb.Metadata.Id != id {
				t.Errorf("another sandbox: %v", sb.Metadata)
			}
			switch {
			case sb.Metadata.Labels["seen"] == "yes" && !stopped:
				stopped = true
				if _, err := c.owner.Client.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "wa", Grace: durationpb.New(time.Second)}); err != nil {
					t.Error(err)
				}
			case sb.Status.Phase == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED && !deleting:
				deleting = true
				if _, err := c.owner.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "wa"}); err != nil {
					t.Error(err)
				}
			}
		}
	})
	if err != nil {
		for _, m := range got {
			t.Log(m)
		}
		t.Fatalf("the watch ended with %v after %d messages", err, len(got))
	}
	if first := got[0].GetSandbox(); first == nil || first.Status.Phase != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		t.Fatalf("first message: %v", got[0])
	}
	if !deleting || strings.Join(logs, "|") != "stdout:hello-log|stderr:warn-log" && strings.Join(logs, "|") != "stderr:warn-log|stdout:hello-log" {
		t.Fatalf("deleting %v, logs %q", deleting, logs)
	}
	for _, r := range []string{"Scheduled", "StopRequested", "DeleteRequested"} {
		if !reasons[r] {
			t.Fatalf("no %s event among %v", r, reasons)
		}
	}
	last := got[len(got)-1].GetSandbox()
	for i := len(got) - 1; last == nil; i-- {
		last = got[i].GetSandbox()
	}
	if last.Status.Phase != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		t.Fatalf("last sandbox message: %v", last.Status)
	}

	// stop_on_terminal: a sandbox made now is watched until READY.
	sb, err := c.owner.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "wb"}, Spec: &shoalv1.SandboxSpec{Node: c.owner.Config.ID, Command: []string{"sleep", "3600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.front.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: sb.Meta.Uid, FollowStatus: true, StopOnTerminal: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err = watchAll(st, nil)
	if err != nil || len(got) == 0 || got[len(got)-1].GetSandbox().GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		t.Fatalf("stop_on_terminal: %d messages, last %v, %v", len(got), got[len(got)-1], err)
	}
	// Already READY: the first message is the last.
	st, err = c.front.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: sb.Meta.Uid, FollowStatus: true, StopOnTerminal: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = watchAll(st, nil); err != nil || len(got) != 1 {
		t.Fatalf("stop_on_terminal of a READY sandbox: %d messages, %v", len(got), err)
	}

	st, err = c.front.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: "00000000-0000-4000-8000-000000000000", FollowStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = watchAll(st, nil)
	wantStatus(t, "watch of an unknown id", err, codes.NotFound, "00000000-0000-4000-8000-000000000000")
}

// A watch whose client reads nothing while the container floods its log
// ends RESOURCE_EXHAUSTED, once the client reads what was queued.
func TestWatchSandboxSlowClient(t *testing.T) {
	t.Parallel()
	c := startStreamNodes(t)
	ctx := streamCtx(t, 3*time.Minute)
	line := strings.Repeat("x", 1000)
	id := c.sandbox(t, ctx, "flood", "sh", "-c", "while :; do echo "+line+"; done")
	st, err := c.front.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: id, FollowLogs: true, LogTailLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the sandbox
		t.Fatal(err)
	}
	// Read nothing for longer than the watch waits for a slow client.
	select {
	case <-time.After(store.SlowWatcherGrace + 5*time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	n := 0
	for {
		_, err := st.Recv()
		if err != nil {
			wantStatus(t, fmt.Sprintf("a slow watch (after %d messages)", n), err, codes.ResourceExhausted, "fell too far behind")
			return
		}
		n++
	}
}

// GetSandboxLogs through a non-owner: the last lines, split by stream,
// filtered by source and level; a time filter is refused.
func TestGetSandboxLogs(t *testing.T) {
	t.Parallel()
	c := startStreamNodes(t)
	ctx := streamCtx(t, 3*time.Minute)
	id := c.sandbox(t, ctx, "lg", "sh", "-c", "echo one; echo two; echo three >&2; exec sleep 3600")
	var resp *openshellv1.GetSandboxLogsResponse
	testenv.Eventually(t, 30*time.Second, "three log lines", func() (bool, error) {
		var err error
		resp, err = c.front.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{SandboxId: id})
		return err == nil && len(resp.Logs) == 3, err
	})
	byStream := map[string][]string{}
	for _, l := range resp.Logs {
		if l.SandboxId != id || l.Source != "sandbox" || l.Level != "INFO" || l.TimestampMs == 0 {
			t.Fatalf("line %v", l)
		}
		byStream[l.Fields["stream"]] = append(byStream[l.Fields["stream"]], l.Message)
	}
	if strings.Join(byStream["stdout"], ",") != "one,two" || strings.Join(byStream["stderr"], ",") != "three" {
		t.Fatalf("lines by stream: %v", byStream)
	}
	for _, tc := range []struct {
		name string
		req  *openshellv1.GetSandboxLogsRequest
		n    int
	}{
		{"sources gateway", &openshellv1.GetSandboxLogsRequest{SandboxId: id, Sources: []string{"gateway"}}, 0},
		{"sources sandbox", &openshellv1.GetSandboxLogsRequest{SandboxId: id, Sources: []string{"gateway", "sandbox"}}, 3},
		{"min_level warn", &openshellv1.GetSandboxLogsRequest{SandboxId: id, MinLevel: "warn"}, 0},
		{"min_level debug", &openshellv1.GetSandboxLogsRequest{SandboxId: id, MinLevel: "DEBUG"}, 3},
	} {
		r, err := c.front.GetSandboxLogs(ctx, tc.req)
		if err != nil || len(r.Logs) != tc.n {
			t.Fatalf("%s: %d lines, %v", tc.name, len(r.GetLogs()), err)
		}
	}
	for _, tc := range []struct {
		name     string
		req      *openshellv1.GetSandboxLogsRequest
		code     codes.Code
		contains string
	}{
		{"since_ms", &openshellv1.GetSandboxLogsRequest{SandboxId: id, SinceMs: 1}, codes.InvalidArgument, "since_ms"},
		{"bad source", &openshellv1.GetSandboxLogsRequest{SandboxId: id, Sources: []string{"kernel"}}, codes.InvalidArgument, "sources"},
		{"bad level", &openshellv1.GetSandboxLogsRequest{SandboxId: id, MinLevel: "loud"}, codes.InvalidArgument, "min_level"},
		{"other workspace", &openshellv1.GetSandboxLogsRequest{SandboxId: id, Workspace: "elsewhere"}, codes.NotFound, id},
		{"unknown id", &openshellv1.GetSandboxLogsRequest{SandboxId: "00000000-0000-4000-8000-000000000000"}, codes.NotFound, "00000000"},
		{"no id", &openshellv1.GetSandboxLogsRequest{}, codes.InvalidArgument, "sandbox_id"},
	} {
		_, err := c.front.GetSandboxLogs(ctx, tc.req)
		wantStatus(t, tc.name, err, tc.code, tc.contains)
	}
}
