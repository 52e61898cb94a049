package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// A watch resumed from a resource_version delivers exactly the changes
// after it, deletions included; a compacted one is Gone.
func TestWatchResumesFromResourceVersion(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := s.CreateSandbox(ctx, sandbox("w"))
	if err != nil {
		t.Fatal(err)
	}
	labelled, err := s.UpdateSandbox(ctx, "default", "w", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["step"] = "2"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	marked, err := s.MarkSandboxDeleting(ctx, "default", "w", store.Preconditions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "w", created.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	// Resume after the create: the label change, the mark, the removal.
	var got []shoalv1.EventType
	var revs []int64
	for ev := range s.WatchSandboxes(ctx, "default", "", created.Meta.ResourceVersion) {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		got = append(got, ev.Type)
		revs = append(revs, ev.Revision)
		if ev.Type == shoalv1.EventType_DELETED {
			if ev.Object.Meta.Uid != created.Meta.Uid {
				t.Fatalf("DELETED event without the last state: %v", ev.Object)
			}
			break
		}
	}
	want := []shoalv1.EventType{shoalv1.EventType_MODIFIED, shoalv1.EventType_MODIFIED, shoalv1.EventType_DELETED}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("events %v, want %v", got, want)
	}
	if revs[0] != labelled.Meta.ResourceVersion || revs[1] != marked.Meta.ResourceVersion {
		t.Fatalf("event revisions %v, want %d, %d, ...", revs, labelled.Meta.ResourceVersion, marked.Meta.ResourceVersion)
	}
	// Compact past the create: resuming from it is Gone.
	resp, err := c.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	ev, ok := <-s.WatchSandboxes(ctx, "default", "", created.Meta.ResourceVersion)
	if !ok || shoal.KindOf(ev.Err) != shoal.KindGone {
		t.Fatalf("watch from a compacted revision: %+v, want a Gone error", ev)
	}
}

// A reader that stops reading does not make the watch queue events
// without bound: the watch ends with RESOURCE_EXHAUSTED saying where to
// resume, after at most its buffer.
func TestSlowWatcherIsCutOff(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := store.SlowWatcherGrace
	store.SlowWatcherGrace = 300 * time.Millisecond
	defer func() { store.SlowWatcherGrace = old }()
	if _, err := s.CreateSandbox(ctx, sandbox("w")); err != nil {
		t.Fatal(err)
	}
	events := s.WatchSandboxes(ctx, "default", "w", 0)
	if ev := <-events; ev.Err != nil {
		t.Fatal(ev.Err)
	}
	for i := range 200 {
		if _, err := s.UpdateSandbox(ctx, "default", "w", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			sb.Meta.Labels["n"] = fmt.Sprint(i)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The reader has not read: once its buffer is full, the grace must
	// run out before it reads (that timeout is what is tested; reading
	// as soon as the writes end made the test pass only when they took
	// longer than the grace).
	deadline := time.Now().Add(30 * time.Second)
	for len(events) < cap(events) {
		if time.Now().After(deadline) {
			t.Fatalf("the watch's buffer holds %d of %d events after 30 s", len(events), cap(events))
		}
		<-time.After(5 * time.Millisecond) // poll interval
	}
	<-time.After(3 * store.SlowWatcherGrace)
	n := 0
	for ev := range events {
		if ev.Err != nil {
			if shoal.KindOf(ev.Err) != shoal.KindResourceExhausted || !strings.Contains(ev.Err.Error(), "watch again from resource_version") {
				t.Fatalf("end of a slow watch: %v", ev.Err)
			}
			if n >= 200 {
				t.Fatalf("all %d events were delivered before the cut-off", n)
			}
			return
		}
		n++
	}
	t.Fatalf("the watch closed after %d events without an error", n)
}

// Continuing a list whose snapshot was compacted away is OUT_OF_RANGE
// (start again), not UNAVAILABLE (retry).
func TestCompactedContinuationIsGone(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := s.CreateSandbox(ctx, sandbox(n)); err != nil {
			t.Fatal(err)
		}
	}
	p1, err := s.ListSandboxes(ctx, "default", store.ListOptions{Limit: 1}, nil)
	if err != nil || p1.Next == nil {
		t.Fatalf("first page: %v", err)
	}
	if _, err := s.CreateSandbox(ctx, sandbox("d")); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = s.ListSandboxes(ctx, "default", *p1.Next, nil)
	if shoal.KindOf(err) != shoal.KindGone {
		t.Fatalf("continuation after compaction: %v, want Gone", err)
	}
}

// A watch from a revision the store has not reached (another cluster's, or
// a typo) ends with KindGone after FutureRevisionWait instead of waiting for
// ever, from etcd and from the watch cache alike; one from a revision that
// is reached during the wait goes on as usual.
func TestWatchFromAFutureRevisionIsGone(t *testing.T) {
	t.Parallel()
	plain, c := newStore(t)
	cached, _, _ := cachedNode(t, c.Endpoints()[0])
	ctx := ctxT(t)
	sb, err := plain.CreateSandbox(ctx, sandbox("a"))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*store.Store{"etcd": plain, "cache": cached} {
		t.Run(name, func(t *testing.T) {
			far := sb.Meta.ResourceVersion + 1_000_000
			start := time.Now()
			ch := s.WatchSandboxes(ctx, "", "", far)
			var got store.Event[*shoalv1.Sandbox]
			select {
			case got = <-ch:
			case <-time.After(time.Minute):
				t.Fatal("a watch from a future revision still waits after a minute")
			}
			if shoal.KindOf(got.Err) != shoal.KindGone || !strings.Contains(got.Err.Error(), fmt.Sprint(far)) {
				t.Fatalf("watch from revision %d: %+v; want KindGone naming it", far, got)
			}
			if took := time.Since(start); took < store.FutureRevisionWait {
				t.Fatalf("refused after %s, before the wait of %s", took, store.FutureRevisionWait)
			}
			if _, open := <-ch; open {
				t.Fatal("the channel stayed open after the terminal error")
			}
			// The next revision, written while the watch waits for it.
			cur, err := c.Get(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			next := cur.Header.Revision + 1
			written := make(chan error, 1)
			go func() { _, err := c.Put(ctx, "/elsewhere/"+name, "v"); written <- err }()
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch = s.WatchSandboxes(wctx, "", "", next)
			if err := <-written; err != nil {
				t.Fatal(err)
			}
			up, err := plain.UpdateSandbox(ctx, "default", "a", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
				sb.Meta.Labels["w"] = name
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-ch:
				if ev.Err != nil || ev.Revision != up.Meta.ResourceVersion {
					t.Fatalf("watch from the next revision: %+v; want the update at %d", ev, up.Meta.ResourceVersion)
				}
			case <-time.After(time.Minute):
				t.Fatal("no event from the watch from the next revision")
			}
		})
	}
}

// Stop ends a watch whose reader stopped reading with its buffer full, and
// returns only once the watch's goroutine has: its channel is closed then,
// and the watch's context ended.
func TestWatchStop(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			s, _ := newStore(t)
			ctx := ctxT(t)
			if cached {
				cache := s.UseCache(store.CacheOptions{})
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- cache.Start(cctx) }()
				t.Cleanup(func() { cancel(); <-done })
			}
			// More than a watch buffers: the replay of the current
			// state blocks on a full channel.
			for i := range 100 {
				if _, err := s.CreateSandbox(ctx, sandbox(fmt.Sprintf("s%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			wctx, cancel := context.WithCancel(ctx)
			w := store.NewWatch(cancel, s.WatchSandboxes(wctx, "default", "", 0))
			if ev := <-w.C; ev.Err != nil || ev.Type != shoalv1.EventType_ADDED {
				t.Fatalf("first event: %+v", ev)
			}
			stopped := make(chan struct{})
			go func() { w.Stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("Stop did not return")
			}
			if wctx.Err() == nil {
				t.Fatal("Stop did not cancel the watch's context")
			}
			select {
			case _, ok := <-w.C:
				if ok {
					t.Fatal("an event after Stop returned")
				}
			default:
				t.Fatal("the channel is open after Stop returned")
			}
		})
	}
}
