package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/store"
)

// A lost node's sandboxes each get NodeLost at the loss and Fenced at the
// fence time (the loss plus the margin), recorded by the leader once the
// fence time has passed; a sandbox deleted before it is removed on the
// fence's proof after it, and its Fenced, which both the removal and the
// loss task record, is there once. Its history reads NodeLost, Fenced,
// Removed; the kept one's NodeLost, Fenced.
func TestLostNodeSandboxesAreFenced(t *testing.T) {
	e := newEnv(t)
	e.register("n1")
	l2 := e.register("n2")
	rec, err := events.New(events.Config{Node: "leader", Log: e.s.EventLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	const margin = 2 * time.Second
	co := e.start(opts{fenceMargin: margin, events: rec})
	wait(t, co.terms.began, 20*time.Second, "leadership")

	e.sandbox("gone", "n2")
	e.sandbox("kept", "n2")
	e.sandbox("far", "n1")
	e.lose(l2)
	since := e.lost("n2", "kept")
	e.deleting("gone") // before the fence time
	e.sandboxGone("gone")

	history := func(name string) []*shoalv1.Event {
		got, err := e.s.EventLog().ListEvents(e.ctx, store.EventFilter{Workspace: "default", Sandbox: name}, 100)
		if err != nil {
			t.Fatal(err)
		}
		return got.Items
	}
	reasons := func(evs []*shoalv1.Event) string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Reason)
		}
		return strings.Join(out, ",")
	}
	for name, want := range map[string]string{"gone": "NodeLost,Fenced,Removed", "kept": "NodeLost,Fenced"} {
		var evs []*shoalv1.Event
		testenv.Eventually(t, 20*time.Second, name+"'s events "+want, func() (bool, error) {
			evs = history(name)
			return reasons(evs) == want, fmt.Errorf("%s", reasons(evs))
		})
		lost, fenced := evs[0], evs[1]
		if !lost.FirstTime.AsTime().Equal(since) || !fenced.FirstTime.AsTime().Equal(since.Add(margin)) {
			t.Errorf("%s: NodeLost at %s, Fenced at %s; want the loss %s and the fence time %s", name,
				lost.FirstTime.AsTime(), fenced.FirstTime.AsTime(), since, since.Add(margin))
		}
		if fenced.Reporter != events.ReporterLeader || fenced.Details["node"] != "n2" || fenced.Count != 1 {
			t.Errorf("%s: Fenced %v", name, fenced)
		}
	}
	if got := history("gone"); got[2].Details["proof"] != "fenced" {
		t.Errorf("gone's Removed: %v; want the fence's proof", got[2])
	}
	if got := history("far"); slices.ContainsFunc(got, func(ev *shoalv1.Event) bool { return ev.Reason == "NodeLost" || ev.Reason == "Fenced" }) {
		t.Errorf("the live node's sandbox got %s", reasons(got))
	}
}
