package docker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
		_, err := r.Exec(ectx, id, []string{"sh", "-c", "echo started; exec sleep 300"}, nil, out, &strings.Builder{})
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
	if _, err := r.Exec(ctx, id, []string{"ps"}, nil, &ps, &ps); err != nil {
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
