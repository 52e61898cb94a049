package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"shoal/internal/backoff"
)

// flakyFault fails its first failures injections with the lab's own error
// (as `docker pause` does under load: "unable to freeze"), and counts
// every call. done is called when the test has seen enough.
type flakyFault struct {
	failures   int
	restoreErr error
	healErr    error
	done       func()

	injects, restores, heals int
}

var errFreeze = errors.New("OCI runtime pause failed: unable to freeze")

func (f *flakyFault) Name() string                  { return "node-stop" }
func (f *flakyFault) Hold(*rand.Rand) time.Duration { return time.Millisecond }
func (f *flakyFault) Target() string                { return "n1" }
func (f *flakyFault) Inject(context.Context) error {
	f.injects++
	if f.injects <= f.failures {
		return errFreeze
	}
	return nil
}
func (f *flakyFault) Restore(context.Context) error {
	f.restores++
	if f.restores == 3 {
		f.done() // the third and last attempt failed and was undone
	}
	return f.restoreErr
}
func (f *flakyFault) Heal(context.Context) error { f.heals++; f.done(); return f.healErr }

// runSchedule runs the scheduler over f alone until f says it is done.
func runSchedule(t *testing.T, f *flakyFault) (ScenarioReport, int64, *history, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.done = cancel
	o := scheduleOptions{
		retry: backoff.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 3},
		unit:  time.Microsecond,
		logf:  t.Logf,
	}
	var sr ScenarioReport
	var injected atomic.Int64
	h := newHistory()
	err := o.run(ctx, h, []Fault{f}, rand.New(rand.NewPCG(1, 2)), &sr, &injected)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the scheduler never got to the end of the fault")
	}
	return sr, injected.Load(), h, err
}

func TestFaultThatFailsToInjectIsRetriedThenReportedNotInjected(t *testing.T) {
	f := &flakyFault{failures: 100}
	sr, injected, h, err := runSchedule(t, f)
	if err != nil {
		t.Fatalf("a fault that did not inject failed the schedule: %v", err)
	}
	if f.injects != 3 || f.restores != 3 || f.heals != 0 {
		t.Fatalf("injects %d, restores %d, heals %d; want 3 attempts, each undone, and no heal", f.injects, f.restores, f.heals)
	}
	if len(sr.Faults) != 1 || injected != 0 || h.faultActive != 0 {
		t.Fatalf("faults %+v, injected %d, fault active %d; want one record, none injected, none active", sr.Faults, injected, h.faultActive)
	}
	rec := sr.Faults[0]
	if rec.Injected() || rec.Attempts != 3 || !strings.Contains(rec.NotInjected, errFreeze.Error()) || rec.Target != "n1" {
		t.Fatalf("record %+v; want not injected after 3 attempts, with the error and the target", rec)
	}

	rep := &Report{Config: map[string]any{"scenarios": []string{"node-stop"}}, Scenarios: []ScenarioReport{sr}}
	rep.summarize(nil)
	if rep.Failed() {
		t.Fatal("a run whose only trouble is a fault not injected failed")
	}
	if rep.Summary.FaultsNotInjected["node-stop"] != 1 || rep.Summary.Faults["node-stop"] != 0 {
		t.Fatalf("summary faults %v, not injected %v", rep.Summary.Faults, rep.Summary.FaultsNotInjected)
	}
	var text bytes.Buffer
	rep.WriteSummary(&text)
	if !strings.Contains(text.String(), "FAULTS NOT INJECTED  1") || !strings.Contains(text.String(), "unable to freeze") {
		t.Fatalf("the text report does not tell the fault was not injected, and why:\n%s", text.String())
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"not_injected":"OCI runtime pause failed: unable to freeze`) || !strings.Contains(string(js), `"faults_not_injected":{"node-stop":1}`) {
		t.Fatalf("the JSON report does not tell the fault was not injected:\n%s", js)
	}

	// A violation still fails the run, faults not injected or not.
	rep.Violations = []Violation{{invNoLeftovers, "node-stop", "still DELETING"}}
	if !rep.Failed() {
		t.Fatal("a run with a violation did not fail")
	}
}

func TestFaultThatInjectsOnARetryIsInjected(t *testing.T) {
	f := &flakyFault{failures: 2}
	sr, injected, _, err := runSchedule(t, f)
	if err != nil {
		t.Fatal(err)
	}
	if f.injects != 3 || f.restores != 2 || f.heals != 1 {
		t.Fatalf("injects %d, restores %d, heals %d; want 2 failures undone, then injected and healed", f.injects, f.restores, f.heals)
	}
	if len(sr.Faults) != 1 || !sr.Faults[0].Injected() || sr.Faults[0].Attempts != 3 || injected != 1 {
		t.Fatalf("faults %+v, injected %d; want one injected on attempt 3", sr.Faults, injected)
	}
}

func TestBrokenHarnessFailsTheSchedule(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *flakyFault
	}{
		{"target not restored", &flakyFault{failures: 100, restoreErr: errors.New("unpause: no such container")}},
		{"heal failed", &flakyFault{healErr: errors.New("node did not serve")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tc.f.done = cancel
			o := scheduleOptions{retry: backoff.Policy{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 3}, unit: time.Microsecond, logf: t.Logf}
			var sr ScenarioReport
			var injected atomic.Int64
			err := o.run(ctx, newHistory(), []Fault{tc.f}, rand.New(rand.NewPCG(1, 2)), &sr, &injected)
			if !errors.Is(err, errHarness) {
				t.Fatalf("err = %v, want a broken harness", err)
			}
			if tc.f.restoreErr != nil && tc.f.injects != 1 {
				t.Fatalf("%d injections after a target that could not be restored; want no retry", tc.f.injects)
			}
		})
	}
}
