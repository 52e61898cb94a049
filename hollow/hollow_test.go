package hollow_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"shoal"
	"shoal/hollow"
)

func next(t *testing.T, ev <-chan shoal.ContainerEvent) shoal.ContainerEvent {
	t.Helper()
	select {
	case e := <-ev:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return shoal.ContainerEvent{}
}

func actions(t *testing.T, ev <-chan shoal.ContainerEvent, n int) []string {
	t.Helper()
	var out []string
	for range n {
		e := next(t, ev)
		out = append(out, e.Action+":"+e.ExitCode)
	}
	return out
}

// The state machine of a hollow container, as the agent and the API see
// it through the runtime's interface.
func TestHollowContainerLifecycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := hollow.New(hollow.Config{Node: "h1"})
	ev, _ := r.Events(ctx)

	id, err := r.Run(ctx, shoal.ContainerSpec{UID: "u1", Name: "a", Workspace: "default", Env: []string{"NVIDIA_API_KEY=k1", "MODE=x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(t, ev, 2); !slices.Equal(got, []string{"create:", "start:"}) {
		t.Errorf("run's events: %v", got)
	}
	st, _ := r.Inspect(ctx, id)
	if !st.Exists || !st.Running || st.Paused {
		t.Errorf("after run: %+v", st)
	}
	var out, errb bytes.Buffer
	for _, tc := range []struct {
		cmd  string
		code int
	}{{"true", 0}, {"false", 1}, {"env", 0}, {"ls", 127}} {
		out.Reset()
		errb.Reset()
		res, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{tc.cmd}}, &out, &errb)
		if err != nil || res.ExitCode != tc.code {
			t.Errorf("exec %s: %d %v, want %d", tc.cmd, res.ExitCode, err, tc.code)
		}
	}
	if !strings.Contains(errb.String(), "ls: not found") {
		t.Errorf("exec of an unknown command: stderr %q", errb.String())
	}
	out.Reset()
	if _, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"env"}}, &out, &errb); err != nil || out.String() != "NVIDIA_API_KEY=k1\nMODE=x\n" {
		t.Errorf("exec env: %q %v", out.String(), err)
	}

	if err := r.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := actions(t, ev, 1); got[0] != "pause:" {
		t.Errorf("pause's event: %v", got)
	}
	if st, _ := r.Inspect(ctx, id); !st.Running || !st.Paused {
		t.Errorf("after pause: %+v", st)
	}
	if _, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"true"}}, &out, &errb); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Errorf("exec in a paused container: %v, want FAILED_PRECONDITION", err)
	}
	if err := r.Pause(ctx, id); err != nil {
		t.Errorf("pause of a paused container: %v", err)
	}
	if err := r.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := actions(t, ev, 1); got[0] != "unpause:" {
		t.Errorf("unpause's event (and none for the second pause): %v", got)
	}

	r.Kill(id, 137)
	if got := actions(t, ev, 1); got[0] != "die:137" {
		t.Errorf("kill's event: %v", got)
	}
	if st, _ := r.Inspect(ctx, id); st.Running || st.ExitCode != 137 || st.Status != "exited" {
		t.Errorf("after kill: %+v", st)
	}
	if _, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"true"}}, &out, &errb); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Errorf("exec in an exited container: %v", err)
	}
	if err := r.Remove(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := actions(t, ev, 1); got[0] != "destroy:" {
		t.Errorf("removal's event: %v", got)
	}
	if st, _ := r.Inspect(ctx, id); st.Exists {
		t.Errorf("after removal: %+v", st)
	}
	if cs, _ := r.List(ctx); len(cs) != 0 {
		t.Errorf("list after removal: %v", cs)
	}
}

// Commands that end at once exit with their code by the time Run returns.
func TestHollowCommandsThatExit(t *testing.T) {
	ctx := context.Background()
	r := hollow.New(hollow.Config{Node: "h1"})
	for _, tc := range []struct {
		cmd     []string
		running bool
		code    int
	}{
		{nil, true, 0},
		{[]string{"sleep", "infinity"}, true, 0},
		{[]string{"true"}, false, 0},
		{[]string{"false"}, false, 1},
		{[]string{"sh", "-c", "echo hi; exit 3"}, false, 3},
		{[]string{"sh", "-c", "exit 300"}, true, 0},
	} {
		id, err := r.Run(ctx, shoal.ContainerSpec{UID: "u", Command: tc.cmd})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Inspect(ctx, id)
		if st.Running != tc.running || st.ExitCode != tc.code {
			t.Errorf("command %q: running %v exit %d, want %v %d", tc.cmd, st.Running, st.ExitCode, tc.running, tc.code)
		}
	}
	if cs, _ := r.List(ctx); len(cs) != 6 || cs[0].Node != "h1" {
		t.Errorf("list: %d containers, %+v", len(cs), cs)
	}
}

// The configured latency is waited out, and a call whose context ends
// first gives up.
func TestHollowLatency(t *testing.T) {
	r := hollow.New(hollow.Config{Node: "h1", Latency: 50 * time.Millisecond})
	t0 := time.Now()
	if _, err := r.Run(context.Background(), shoal.ContainerSpec{UID: "u"}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Errorf("run took %s with a latency of 50ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Run(ctx, shoal.ContainerSpec{UID: "v"}); err == nil {
		t.Error("run with an ended context succeeded")
	}
	if cap, _ := r.Capacity(ctx); cap.NCPU != hollow.DefaultCapacity.NCPU {
		t.Errorf("capacity: %+v", cap)
	}
	if ok, _ := r.HasImage(ctx, "any:thing"); !ok {
		t.Error("a hollow runtime has every image")
	}
}
