package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/uuid"

	"shoal"
	"shoal/docker"
	"shoal/internal/testenv"
)

func newRuntime(t *testing.T, node, cluster string) *docker.Runtime {
	t.Helper()
	r, err := docker.New(context.Background(), docker.Config{Node: node, Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func nodeID() string { return fmt.Sprintf("dt%x", time.Now().UnixNano())[:14] }

func spec(name string) shoal.ContainerSpec {
	return shoal.ContainerSpec{UID: uuid.NewString(), Name: name, Workspace: "default", Image: docker.DefaultImage}
}

// A. Two clusters' runtimes with the same node id on one engine: each
// lists, and removes by uid, only its own cluster's containers.
func TestClustersOnOneEngineAreSeparate(t *testing.T) {
	dc := testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	a, b := newRuntime(t, node, "aaaa"), newRuntime(t, node, "bbbb")
	ctx := context.Background()
	sa, sb := spec("a"), spec("b")
	ida, err := a.Run(ctx, sa)
	if err != nil {
		t.Fatal(err)
	}
	idb, err := b.Run(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r        *docker.Runtime
		own, not string
	}{{a, ida, idb}, {b, idb, ida}} {
		cs, err := tc.r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].ID != tc.own {
			t.Fatalf("cluster %s lists %+v; want only its own container %s", tc.r.Cluster(), cs, tc.own[:12])
		}
	}
	// Teardown by the other cluster's uid touches nothing.
	if err := a.Remove(ctx, sb.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ContainerInspect(ctx, idb); err != nil {
		t.Fatalf("cluster aaaa removed cluster bbbb's container: %v", err)
	}
	// Its own uid it removes.
	if err := b.Remove(ctx, sb.UID); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Inspect(ctx, idb); err != nil || st.Exists {
		t.Fatalf("own container not removed: %+v %v", st, err)
	}
	// Run of a uid that the other cluster has a container of makes a new
	// one rather than adopting it.
	sa2 := spec("a2")
	sa2.UID = sa.UID
	if _, err := b.Run(ctx, sa2); err != nil {
		t.Fatal(err)
	}
	cs, err := b.List(ctx)
	if err != nil || len(cs) != 1 || cs[0].ID == ida {
		t.Fatalf("cluster bbbb adopted cluster aaaa's container: %+v %v", cs, err)
	}
}

// B2. A command that ends at once is seen as ended once Run returns with
// Settle, and a second Run does not start it again.
func TestRunSettlesAndDoesNotRestartAnEndedCommand(t *testing.T) {
	dc := testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	r := newRuntime(t, node, "cccc")
	ctx := context.Background()
	s := spec("once")
	s.Command = []string{"sh", "-c", "exit 3"}
	s.Settle = 10 * time.Second
	id, err := r.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Inspect(ctx, id)
	if err != nil || st.Running || st.ExitCode != 3 {
		t.Fatalf("after Run with Settle: %+v %v; want exited with code 3", st, err)
	}
	before, err := dc.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if id2, err := r.Run(ctx, s); err != nil || id2 != id {
		t.Fatalf("second Run: %s %v", id2, err)
	}
	after, err := dc.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.StartedAt != before.State.StartedAt || after.RestartCount != 0 {
		t.Fatalf("the ended command was started again: %s -> %s", before.State.StartedAt, after.State.StartedAt)
	}
}

// B3. What Docker refuses comes back in Docker's words, as a permanent
// error, and never with a credential in it: runc quotes an environment
// entry it cannot use.
func TestRunErrorsCarryDockersWordsWithoutSecrets(t *testing.T) {
	testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	r := newRuntime(t, node, "dddd")
	ctx := context.Background()

	secret := "nvapi-sec\x00ret-4711"
	s := spec("leak")
	s.Env = []string{"NVIDIA_API_KEY=" + secret}
	s.Secrets = []string{secret}
	id, err := r.Run(ctx, s)
	if shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Fatalf("Run with an env value runc refuses: %v, want FAILED_PRECONDITION", err)
	}
	for _, part := range []string{"ret-4711", "nvapi-sec"} {
		if strings.Contains(err.Error(), part) {
			t.Fatalf("the error shows the credential: %v", err)
		}
	}
	if !strings.Contains(err.Error(), "null") || !strings.Contains(err.Error(), docker.Redacted) {
		t.Fatalf("the error does not carry Docker's reason: %v", err)
	}
	// The container's own state says the same, also without the secret.
	st, err := r.Inspect(ctx, id)
	if err != nil || st.Error == "" {
		t.Fatalf("inspect after a failed start: %+v %v", st, err)
	}
	if strings.Contains(st.Error, "ret-4711") {
		t.Fatalf("State.Error shows the credential: %s", st.Error)
	}

	// A CPU quota the kernel refuses: Docker's reason, not "exit code 128".
	s = spec("cpu")
	s.CPUMillis = 1
	_, err = r.Run(ctx, s)
	if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "Docker") {
		t.Fatalf("Run with 1 millicpu: %v, want Docker's refusal", err)
	}
}

// C1 at the runtime: Exec returns when ctx ends and the process is gone.
func TestExecKilledWhenContextEnds(t *testing.T) {
	testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	r := newRuntime(t, node, "eeee")
	ctx := context.Background()
	id, err := r.Run(ctx, spec("ex"))
	if err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	out := &signalWriter{on: "started", signal: started}
	done := make(chan error, 1)
	go func() {
		_, err := r.Exec(ectx, id, shoal.ExecSpec{Command: []string{"sh", "-c", "echo started; exec sleep 300"}}, out, &strings.Builder{})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("exec ended early: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("exec did not start within a minute")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec after cancel: %v", err)
	}
	var ps strings.Builder
	if _, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"ps"}}, &ps, &ps); err != nil {
		t.Fatal(err)
	}
	// Exec returns only after the kill has run.
	if strings.Contains(ps.String(), "sleep 300") {
		t.Fatalf("sleep still runs after its exec was cancelled:\n%s", ps.String())
	}
}

func TestCapacity(t *testing.T) {
	dc := testenv.RequireDocker(t)
	r := newRuntime(t, nodeID(), "ffff")
	c, err := r.Capacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.NCPU != info.NCPU || c.MemTotal != info.MemTotal || c.NCPU <= 0 {
		t.Fatalf("capacity %+v; docker info says %d CPUs, %d bytes", c, info.NCPU, info.MemTotal)
	}
}

// signalWriter closes signal once the output contains on.
type signalWriter struct {
	buf    strings.Builder
	on     string
	signal chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.signal != nil && strings.Contains(w.buf.String(), w.on) {
		close(w.signal)
		w.signal = nil
	}
	return len(p), nil
}

// An exec that an earlier Runtime of the node started (the node died and
// was started again) is killed by ReapExecs with its process group; this
// Runtime's own exec, an exec started by hand, what a finished exec left
// running and the sandbox's own command are not.
func TestReapExecsKillsOnlyAnEarlierRunsExecs(t *testing.T) {
	dc := testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	earlier, cur := newRuntime(t, node, "rrrr"), newRuntime(t, node, "rrrr")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := earlier.Run(ctx, spec("reap"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cur.ReapExecs(ctx, id); err != nil || len(got) != 0 {
		t.Fatalf("ReapExecs of a container without execs: %v, %v", got, err)
	}

	// started runs cmd through r in the background until it ends or the
	// test does, once it has printed "started".
	type ended struct {
		code int
		err  error
	}
	started := func(r *docker.Runtime, cmd string) <-chan ended {
		t.Helper()
		ectx, ecancel := context.WithCancel(ctx)
		t.Cleanup(ecancel)
		up := make(chan struct{})
		done := make(chan ended, 1)
		go func() {
			res, err := r.Exec(ectx, id, shoal.ExecSpec{Command: []string{"sh", "-c", cmd}}, &signalWriter{on: "started", signal: up}, &strings.Builder{})
			done <- ended{res.ExitCode, err}
		}()
		select {
		case <-up:
		case e := <-done:
			t.Fatalf("exec %q ended early: %d %v", cmd, e.code, e.err)
		case <-ctx.Done():
			t.Fatalf("exec %q did not start", cmd)
		}
		return done
	}
	// The earlier run's exec, with a child in its process group.
	orphaned := started(earlier, "sleep 4001 & echo started; sleep 4002")
	// A finished exec of the earlier run that left a process running.
	if res, err := earlier.Exec(ctx, id, shoal.ExecSpec{Command: []string{"sh", "-c", "sleep 4003 </dev/null >/dev/null 2>&1 &"}}, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec leaving a background process: %d %v", res.ExitCode, err)
	}
	// This run's exec.
	own := started(cur, "echo started; exec sleep 4004")
	// An exec started by hand, without shoal.
	ex, err := dc.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"sleep", "4005"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the hand-started exec runs", func() (bool, error) {
		return strings.Contains(processes(t, cur, id), "sleep 4005"), nil
	})

	got, err := cur.ReapExecs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID <= 1 || !strings.Contains("sh sleep", got[0].Command) {
		t.Fatalf("ReapExecs reaped %+v; want the earlier run's one exec", got)
	}
	select {
	case e := <-orphaned:
		// Its output ended with its process: killed (SIGKILL).
		if e.err != nil || e.code != 137 {
			t.Fatalf("the reaped exec ended with %d %v; want exit code 137", e.code, e.err)
		}
	case <-ctx.Done():
		t.Fatal("the reaped exec's stream did not end")
	}
	ps := processes(t, cur, id)
	for _, gone := range []string{"sleep 4001", "sleep 4002"} {
		if strings.Contains(ps, gone) {
			t.Errorf("%q still runs after ReapExecs:\n%s", gone, ps)
		}
	}
	for _, kept := range []string{"sleep 3600", "sleep 4003", "sleep 4004", "sleep 4005"} {
		if !strings.Contains(ps, kept) {
			t.Errorf("ReapExecs killed %q, which is not an exec of an earlier run:\n%s", kept, ps)
		}
	}
	select {
	case e := <-own:
		t.Fatalf("this run's exec ended: %d %v", e.code, e.err)
	default:
	}
	if got, err := cur.ReapExecs(ctx, id); err != nil || len(got) != 0 {
		t.Fatalf("a second ReapExecs: %v, %v; want nothing left to reap", got, err)
	}
}

// processes lists a container's processes' command lines.
func processes(t *testing.T, r *docker.Runtime, id string) string {
	t.Helper()
	var ps strings.Builder
	if _, err := r.Exec(context.Background(), id, shoal.ExecSpec{Command: []string{"ps", "-o", "pid,ppid,args"}}, &ps, &ps); err != nil {
		t.Fatal(err)
	}
	return ps.String()
}
