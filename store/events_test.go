package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/store"
)

// writeEvent writes one event as a recorder would, at time at.
func writeEvent(t *testing.T, l *store.EventLog, lease int64, ws, name, uid, id, reason, node, by string, at time.Time) *shoalv1.Event {
	t.Helper()
	ev := &shoalv1.Event{Workspace: ws, Sandbox: name, SandboxUid: uid, Id: id, Reason: reason, Node: node, ReportingNode: by,
		FirstTime: timestamppb.New(at), LastTime: timestamppb.New(at), Count: 1}
	if err := l.WriteEvents(ctxT(t), []events.Write{{Event: ev, Lease: lease}}); err != nil {
		t.Fatal(err)
	}
	return ev
}

func ids(evs []*shoalv1.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Id)
	}
	return strings.Join(out, ",")
}

// Lists select by workspace, sandbox (never a sandbox whose name starts
// with it), uid and node (the sandbox's or the recorder's), newest last,
// the newest limit of them with the rest counted; a value that does not
// decode is skipped. A watch from the list's revision streams what is
// written after it: new events, rewrites of coalesced ones, never expiries.
func TestEventLogListAndWatch(t *testing.T) {
	ctx := ctxT(t)
	c, _ := testenv.Etcd(t)
	l := store.NewEventLog(c, "")
	lease, err := l.GrantLease(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	writeEvent(t, l, lease, "default", "a", "u1", "e3", "Started", "n1", "n1", at(3))
	writeEvent(t, l, lease, "default", "a", "u1", "e1", "Scheduled", "n1", "n0", at(1))
	writeEvent(t, l, lease, "default", "ab", "u2", "e2", "Scheduled", "n2", "n0", at(2))
	writeEvent(t, l, lease, "team", "a", "u3", "e4", "Scheduled", "n2", "n0", at(4))
	if _, err := c.Put(ctx, "/shoal/events/default/a/zz-corrupt", "\xff\xff not an event"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    store.EventFilter
		want string
	}{
		{store.EventFilter{}, "e1,e2,e3,e4"},
		{store.EventFilter{Workspace: "default", Sandbox: "a"}, "e1,e3"},
		{store.EventFilter{Workspace: "default"}, "e1,e2,e3"},
		{store.EventFilter{UID: "u3"}, "e4"},
		{store.EventFilter{Node: "n2"}, "e2,e4"},
		{store.EventFilter{Node: "n1"}, "e1,e3"},
		{store.EventFilter{Node: "n0"}, "e1,e2,e4"},
	} {
		got, err := l.ListEvents(ctx, tc.f, 100)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got.Items) != tc.want || got.Omitted != 0 {
			t.Errorf("ListEvents(%+v) = %s (omitted %d); want %s", tc.f, ids(got.Items), got.Omitted, tc.want)
		}
	}
	got, err := l.ListEvents(ctx, store.EventFilter{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ids(got.Items) != "e3,e4" || got.Omitted != 2 {
		t.Fatalf("the newest 2: %s, omitted %d; want e3,e4 and 2", ids(got.Items), got.Omitted)
	}

	wctx, cancel := context.WithCancel(ctx)
	w := store.NewWatch(cancel, l.WatchEvents(wctx, store.EventFilter{Workspace: "default", Sandbox: "a"}, got.Revision))
	defer w.Stop()
	short, err := l.GrantLease(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeEvent(t, l, lease, "default", "ab", "u2", "e5", "Started", "n2", "n2", at(5)) // not a's
	writeEvent(t, l, short, "default", "a", "u1", "e6", "Stopped", "n1", "n1", at(6))
	if _, err := c.Revoke(ctx, clientv3.LeaseID(short)); err != nil { // e6 expires
		t.Fatal(err)
	}
	again := writeEvent(t, l, lease, "default", "a", "u1", "e3", "Started", "n1", "n1", at(3))
	again.Count = 2
	again.LastTime = timestamppb.New(at(7))
	if err := l.WriteEvents(ctx, []events.Write{{Event: again, Lease: lease}}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 3 {
		select {
		case ev := <-w.C:
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			seen = append(seen, fmt.Sprintf("%s %s x%d", ev.Type, ev.Object.Id, ev.Object.Count))
		case <-time.After(10 * time.Second):
			t.Fatalf("watch: only %v", seen)
		}
	}
	if want := "ADDED e6 x1,MODIFIED e3 x1,MODIFIED e3 x2"; strings.Join(seen, ",") != want {
		t.Fatalf("watch saw %v; want %s", seen, want)
	}

	future := l.WatchEvents(ctx, store.EventFilter{}, got.Revision+1000)
	if ev := <-future; shoal.KindOf(ev.Err) != shoal.KindGone {
		t.Fatalf("a watch from a revision never given out: %v; want GONE", ev.Err)
	}
	for range future {
	}
}

type recorded struct {
	sb *shoalv1.Sandbox
	e  events.Event
}

// sink is the store's Recorder in these tests: it keeps what is recorded.
type sink chan recorded

func (s sink) Record(sb *shoalv1.Sandbox, e events.Event) { s <- recorded{sb, e} }

func (s sink) next(t *testing.T) recorded {
	t.Helper()
	select {
	case r := <-s:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("nothing recorded")
	}
	return recorded{}
}

// The store records what its writes did once their Txn committed: the
// create's Scheduled with the node and why, and the removal's Removed
// with the proof that let it go, a fenced owner's Fenced first.
func TestStoreRecordsScheduledAndRemoved(t *testing.T) {
	ctx := ctxT(t)
	c, _ := testenv.Etcd(t)
	rec := make(sink, 16)
	s := store.New(c, store.Options{Events: rec})
	for _, n := range []string{"n1", "n2"} {
		l, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: n, Address: n + ":7443"}, Instance: n}, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	pinned, err := s.CreateSandboxOn(ctx, sandbox("pinned"), store.Placement{Node: "n1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	r := rec.next(t)
	if r.e.Reason != events.Scheduled || r.sb.Meta.Uid != pinned.Meta.Uid || r.e.Details["node"] != "n1" || r.e.Details["why"] != "spec.node names it" {
		t.Fatalf("recorded %+v about %s", r.e, r.sb.Meta.Name)
	}
	if _, err := s.CreateSandboxOn(ctx, sandbox("chosen"), store.Placement{Selector: map[string]string{}}, ""); err != nil {
		t.Fatal(err)
	}
	if r = rec.next(t); !strings.HasPrefix(r.e.Details["why"], "the fewest sandboxes (") || !strings.Contains(r.e.Message, "of the 2 nodes that fit") {
		t.Fatalf("placement's Scheduled: %+v", r.e)
	}

	if _, err := s.MarkSandboxDeleting(ctx, "default", "pinned", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTeardown(ctx, "default", "pinned", pinned.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "pinned", pinned.Meta.Uid, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if r = rec.next(t); r.e.Reason != events.Removed || r.e.Details["proof"] != "torn_down" || r.sb.Meta.Uid != pinned.Meta.Uid {
		t.Fatalf("removal recorded %+v", r.e)
	}
	select {
	case r := <-rec:
		t.Fatalf("recorded more: %+v", r.e)
	default:
	}
}
