package store_test

import (
	"context"
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
	if _, err := s.RemoveSandbox(ctx, "default", "w", created.Meta.Uid, nil); err != nil {
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
