package store_test

import (
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/metrics"
	"shoal/store"
)

// fence is a fencing token as a lease hands it out: a leader key and its
// create revision.
type fence struct {
	key string
	rev int64
}

func (f fence) Key() string { return f.key }
func (f fence) Rev() int64  { return f.rev }

// The leader's writes outside the update loop (node loss, repairs) are
// fenced as its updates are, and observed as they are: a deposed leader's
// MarkNodeLost, stale-intent removal and stray-key collection return
// ErrFenced, change nothing, each count in shoal_fenced_rejections_total
// and leave a "store.txn" span marked fenced; the same writes under a
// live fence commit and leave unfenced spans.
func TestFencedTxnsOutsideTheUpdateLoop(t *testing.T) {
	t.Parallel()
	c, _ := testenv.Etcd(t)
	ctx := ctxT(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	m := metrics.New()
	s := store.New(c, store.Options{Metrics: m, Tracer: tp.Tracer("test")})

	const leader = "/shoal/leader/x"
	put, err := c.Put(ctx, leader, "me")
	if err != nil {
		t.Fatal(err)
	}
	old := fence{leader, put.Header.Revision}
	if _, err := c.Delete(ctx, leader); err != nil {
		t.Fatal(err)
	}
	put, err = c.Put(ctx, leader, "someone else")
	if err != nil {
		t.Fatal(err)
	}
	live := fence{leader, put.Header.Revision}

	// A stale intent and a stray attachment key: what the repairs remove.
	if _, err := c.Put(ctx, "/shoal/deleting/default/ghost", "ghost-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/shoal/attach/default/p/ghost", "ghost-uid"); err != nil {
		t.Fatal(err)
	}
	rejections := func() float64 {
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "shoal_fenced_rejections_total" {
				return f.Metric[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	if _, err := s.MarkNodeLost(ctx, "n9", old); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("MarkNodeLost under a lost fence: %v, want ErrFenced", err)
	}
	if _, err := s.CompleteIntent(ctx, "default", "ghost", "ghost-uid", old); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale intent removal under a lost fence: %v, want ErrFenced", err)
	}
	if _, err := s.CollectAttachments(ctx, old); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("collection under a lost fence: %v, want ErrFenced", err)
	}
	if got := rejections(); got != 3 {
		t.Fatalf("shoal_fenced_rejections_total = %v after three fenced-out writes, want 3", got)
	}
	for _, k := range []string{"/shoal/deleting/default/ghost", "/shoal/attach/default/p/ghost"} {
		if r, err := c.Get(ctx, k); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("%s after fenced-out writes: %v (%v)", k, r, err)
		}
	}

	if removed, err := s.CompleteIntent(ctx, "default", "ghost", "ghost-uid", live); err != nil || !removed {
		t.Fatalf("stale intent removal under the live fence: %v %v", removed, err)
	}
	if n, err := s.CollectAttachments(ctx, live); err != nil || n != 1 {
		t.Fatalf("collection under the live fence: %d %v", n, err)
	}
	if got := rejections(); got != 3 {
		t.Fatalf("shoal_fenced_rejections_total = %v after committed writes, want still 3", got)
	}

	fenced, committed := map[string]int{}, map[string]int{}
	for _, sp := range rec.Ended() {
		if sp.Name() != "store.txn" {
			continue
		}
		var what string
		var isFenced, ok bool
		for _, a := range sp.Attributes() {
			switch a.Key {
			case "shoal.txn":
				what = a.Value.AsString()
			case "shoal.update.fenced":
				isFenced = a.Value.AsBool()
			case "shoal.txn.succeeded":
				ok = a.Value.AsBool()
			}
		}
		if isFenced {
			fenced[what]++
		} else if ok {
			committed[what]++
		}
	}
	for _, what := range []string{"node lost", "stale intent removed", "stray key removed"} {
		if fenced[what] != 1 {
			t.Errorf("fenced %q spans: %d, want 1 (all: %v)", what, fenced[what], fenced)
		}
	}
	for _, what := range []string{"stale intent removed", "stray key removed"} {
		if committed[what] != 1 {
			t.Errorf("committed %q spans: %d, want 1 (all: %v)", what, committed[what], committed)
		}
	}
}

// Every write outside the update loop leaves a "store.txn" span naming it:
// a delete's intent, the owner's teardown record, the node registry's
// writes, `node remove`, the records made once, and the snapshot's read.
func TestEveryTxnHasASpan(t *testing.T) {
	t.Parallel()
	c, _ := testenv.Etcd(t)
	ctx := ctxT(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	s := store.New(c, store.Options{Tracer: tp.Tracer("test")})
	if _, err := s.ClusterID(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "n1:7443"}, Instance: "i"}, l.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.CordonNode(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.CordonNode(ctx, "n1", false); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandboxOn(ctx, sandbox("a"), store.Placement{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkSandboxDeleting(ctx, "default", "a", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTeardown(ctx, "default", "a", sb.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, sp := range rec.Ended() {
		if sp.Name() != "store.txn" {
			continue
		}
		for _, a := range sp.Attributes() {
			if a.Key == "shoal.txn" {
				got[a.Value.AsString()]++
			}
		}
	}
	for what, n := range map[string]int{"make once": 1, "register node": 1, "cordon node": 2, "delete intent": 1, "record teardown": 1, "snapshot": 1, "forget node": 1} {
		if got[what] < n {
			t.Errorf("%d %q spans, want at least %d (all: %v)", got[what], what, n, got)
		}
	}
}
