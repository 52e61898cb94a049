package apiserver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/internal/testenv"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readySandbox(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("sandbox %s: %s (%s), want READY", name, sb.Status.Phase, sb.Status.Message)
	}
	return sb
}

// execResult runs a command to its end and returns its stdout, stderr, the
// exit code and the largest chunk seen.
type execResult struct {
	stdout, stderr []byte
	code           int32
	maxChunk       int
}

func execAll(ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) (execResult, error) {
	var r execResult
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		return r, err
	}
	for {
		ch, err := st.Recv()
		if err != nil {
			return r, err // EOF before the exit chunk is an error too
		}
		r.maxChunk = max(r.maxChunk, len(ch.Data))
		switch ch.Stream {
		case "stdout":
			r.stdout = append(r.stdout, ch.Data...)
		case "stderr":
			r.stderr = append(r.stderr, ch.Data...)
		}
		if ch.Exited {
			r.code = ch.ExitCode
			return r, nil
		}
	}
}

// processes is the output of ps in the sandbox.
func processes(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string) string {
	t.Helper()
	r, err := execAll(ctx, c, name, "ps")
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	return string(r.stdout)
}

// startExec starts a command whose first output line is "started" and
// returns once that line has arrived.
func startExec(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) shoalv1.Shoal_ExecClient {
	t.Helper()
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := st.Recv()
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	if !strings.Contains(string(ch.Data), "started") {
		t.Fatalf("exec %q: first chunk %q, want \"started\"", cmd, ch.Data)
	}
	return st
}

// C1. A command started by exec dies, children and all, when its client
// cancels the call.
func TestExecKilledWhenClientCancels(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	readySandbox(t, ctx, n.Client, "ex")

	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A child in the background and the command itself: both must go.
	startExec(t, callCtx, n.Client, "ex", "sh", "-c", "sleep 301 & echo started; exec sleep 300")
	if ps := processes(t, ctx, n.Client, "ex"); !strings.Contains(ps, "sleep 300") || !strings.Contains(ps, "sleep 301") {
		t.Fatalf("the exec'd processes are not running:\n%s", ps)
	}
	cancel()
	var ps string
	testenv.Eventually(t, 30*time.Second, "exec'd processes killed after the client cancelled", func() (bool, error) {
		ps = processes(t, ctx, n.Client, "ex")
		return !strings.Contains(ps, "sleep 30"), nil
	})
}

// C1. Output has no total cap: 10 MiB arrive byte for byte, in chunks of
// at most 64 KiB.
func TestExecStreamsTenMegabytes(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	readySandbox(t, ctx, n.Client, "big")
	const size = 10 << 20
	r, err := execAll(ctx, n.Client, "big", "sh", "-c", "head -c 10485760 /dev/urandom | tee /root/out; echo done >&2")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || string(r.stderr) != "done\n" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if len(r.stdout) != size {
		t.Fatalf("got %d bytes of stdout, want %d", len(r.stdout), size)
	}
	if r.maxChunk > apiserver.MaxChunk {
		t.Fatalf("a chunk of %d bytes; at most %d allowed", r.maxChunk, apiserver.MaxChunk)
	}
	sum, err := execAll(ctx, n.Client, "big", "sha256sum", "/root/out")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.Sum256(r.stdout)
	if want := strings.Fields(string(sum.stdout)); len(want) == 0 || want[0] != hex.EncodeToString(got[:]) {
		t.Fatalf("the received bytes differ from what the command wrote: sha256 %x, in the sandbox %q", got, sum.stdout)
	}
}

func wantExhausted(t *testing.T, err error, flag string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), flag) {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming %s", err, flag)
	}
}

// C2. Watches beyond --max-watches, and exec, copy or follow streams
// beyond --max-execs, are refused with RESOURCE_EXHAUSTED; a freed slot is taken
// again.
func TestStreamCaps(t *testing.T) {
	testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	cfg.MaxWatches, cfg.MaxExecs = 3, 2
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)
	readySandbox(t, ctx, n.Client, "cap")

	// A watch from revision 0 replays the sandbox first: once that event
	// has arrived, the stream holds its slot.
	watch := func(ctx context.Context) (shoalv1.Shoal_WatchSandboxesClient, error) {
		w, err := n.Client.WatchSandboxes(ctx, &shoalv1.WatchSandboxesRequest{})
		if err != nil {
			return nil, err
		}
		_, err = w.Recv()
		return w, err
	}
	cancels := make([]context.CancelFunc, 0, 3)
	for range 3 {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancels = append(cancels, cancel)
		if _, err := watch(wctx); err != nil {
			t.Fatalf("watch within the cap: %v", err)
		}
	}
	_, err := watch(ctx)
	wantExhausted(t, err, "--max-watches")
	cancels[0]()
	testenv.Eventually(t, 30*time.Second, "a watch accepted once one closed", func() (bool, error) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := watch(wctx)
		return err == nil, err
	})

	for range 2 {
		ectx, cancel := context.WithCancel(ctx)
		defer cancel()
		startExec(t, ectx, n.Client, "cap", "sh", "-c", "echo started; exec sleep 300")
	}
	_, err = execAll(ctx, n.Client, "cap", "true")
	wantExhausted(t, err, "--max-execs")
	// An interactive exec is an exec: refused too, at its first answer.
	iexec, err := n.Client.ExecInteractive(ctx)
	if err == nil {
		err = iexec.Send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_Start{Start: &shoalv1.ExecRequest{Name: "cap", Command: []string{"true"}}}})
	}
	if err == nil {
		_, err = iexec.Recv()
	}
	wantExhausted(t, err, "--max-execs")
	// Copies hold a slot too, either way.
	_, err = copyIn(ctx, n.Client, &shoalv1.CopyToSandboxStart{Name: "cap", Path: "/tmp"}, tarOf(t, tarEntry{name: "x", body: "x"}))
	wantExhausted(t, err, "--max-execs")
	_, _, err = copyOut(ctx, n.Client, &shoalv1.CopyFromSandboxRequest{Name: "cap", Path: "/etc/hostname"})
	wantExhausted(t, err, "--max-execs")
	follow, err := n.Client.Logs(ctx, &shoalv1.LogsRequest{Name: "cap", Follow: true})
	if err == nil {
		_, err = follow.Recv()
	}
	wantExhausted(t, err, "--max-execs")
	// A plain log read ends by itself and is not capped.
	logs, err := n.Client.Logs(ctx, &shoalv1.LogsRequest{Name: "cap"})
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = logs.Recv()
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("plain logs beyond the exec cap: %v", err)
	}
}

// C3. Shutdown with a watch, a follow and an exec open ends them at once,
// with UNAVAILABLE, instead of waiting out the 10 s graceful timeout.
func TestShutdownEndsStreams(t *testing.T) {
	testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)
	readySandbox(t, ctx, n.Client, "sd")

	// A connection of our own: the test node's client is closed by Stop,
	// which would end the streams from the client side.
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := shoalv1.NewShoalClient(conn)
	w, err := c.WatchSandboxes(ctx, &shoalv1.WatchSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	ex := startExec(t, ctx, c, "sd", "sh", "-c", "echo started; exec sleep 300")

	start := time.Now()
	n.Stop()
	took := time.Since(start)
	if took > cfg.ShutdownTimeout/2 {
		t.Fatalf("shutdown with open streams took %s; the graceful timeout is %s", took, cfg.ShutdownTimeout)
	}
	for what, recv := range map[string]func() error{
		"watch": func() error { _, err := w.Recv(); return err },
		"exec":  func() error { _, err := ex.Recv(); return err },
	} {
		var err error
		for err == nil {
			err = recv()
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s at shutdown: %v, want UNAVAILABLE", what, err)
		}
	}
}

// D. CreateSandbox refuses at once what this node's engine cannot run: a
// missing image (this node being the only one it can go to), more CPU or
// memory than the engine has (from the node's registration, as placement
// reads it for any node). Nothing is stored.
func TestCreateChecksTheEngine(t *testing.T) {
	dc := testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, time.Minute)
	info, err := dc.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		spec  *shoalv1.SandboxSpec
		code  codes.Code
		words []string
	}{
		{"noimage", &shoalv1.SandboxSpec{Image: "shoal/no-such-image:" + n.Config.ID}, codes.FailedPrecondition, []string{"shoal/no-such-image", "not present"}},
		{"cpu", &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{CpuMillis: int64(info.NCPU)*1000 + 1}}, codes.FailedPrecondition, []string{"sandbox.spec.resources.cpu_millis", fmt.Sprintf("engine has %d CPUs", info.NCPU), n.Config.ID}},
		{"mem", &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{MemoryBytes: info.MemTotal + 1}}, codes.FailedPrecondition, []string{"sandbox.spec.resources.memory_bytes", fmt.Sprint(info.MemTotal)}},
		// Pinned elsewhere: not this node's engine to ask.
		{"elsewhere", &shoalv1.SandboxSpec{Node: "no-such-node", Image: "shoal/no-such-image:" + n.Config.ID}, codes.FailedPrecondition, []string{`node "no-such-node" is not known`}},
	} {
		start := time.Now()
		_, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: tc.name}, Spec: tc.spec}})
		if status.Code(err) != tc.code {
			t.Fatalf("%s: %v, want %s", tc.name, err, tc.code)
		}
		for _, w := range tc.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not say %q", tc.name, err, w)
			}
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: refused after %s, not at once", tc.name, took)
		}
		if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: tc.name}); status.Code(err) != codes.NotFound {
			t.Errorf("%s: stored although refused: %v", tc.name, err)
		}
	}
	// Exactly what the engine has is fine.
	sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "fits"},
		Spec: &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{CpuMillis: int64(info.NCPU) * 1000}}}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_PROVISIONING {
		t.Fatalf("a sandbox within the engine's capacity: %v %v", sb, err)
	}
}
