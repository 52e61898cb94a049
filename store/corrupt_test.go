package store_test

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// One corrupt sandbox and one corrupt provider: lists skip them with a
// warning, watches go on, get names the key with DATA_LOSS, and delete
// removes them with the keys that hang off them.
func TestCorruptRecordsAreIsolated(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateProvider(ctx, provider("good-p")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProvider(ctx, provider("bad-p")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "m", "z"} {
		if _, err := s.CreateSandbox(ctx, sandbox(n, "good-p", "bad-p")); err != nil {
			t.Fatal(err)
		}
	}
	events := s.WatchSandboxes(ctx, "default", "", 0)
	for range 3 {
		if ev := <-events; ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	garbage := "\xff\xfe garbage \x00\x01"
	if _, err := c.Put(ctx, s.SandboxKey("default", "m"), garbage); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, s.ProviderKey("default", "bad-p"), garbage); err != nil {
		t.Fatal(err)
	}
	// The watch skips the corrupt write and delivers the next good one.
	if _, err := s.UpdateSandbox(ctx, "default", "z", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["after"] = "corruption"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Err != nil || ev.Object.GetMeta().GetName() != "z" {
		t.Fatalf("watch after a corrupt write: %+v", ev)
	}

	page, err := s.ListSandboxes(ctx, "default", store.ListOptions{}, nil)
	if err != nil {
		t.Fatalf("list with a corrupt record: %v", err)
	}
	if len(page.Items) != 2 || len(page.Warnings) != 1 || !strings.Contains(page.Warnings[0], s.SandboxKey("default", "m")) {
		t.Fatalf("list: %d items, warnings %q; want a and z, and one warning naming m's key", len(page.Items), page.Warnings)
	}
	// Paging past the corrupt record too.
	p1, err := s.ListSandboxes(ctx, "default", store.ListOptions{Limit: 1}, nil)
	if err != nil || p1.Next == nil {
		t.Fatalf("first page: %v", err)
	}
	p2, err := s.ListSandboxes(ctx, "default", *p1.Next, nil)
	if err != nil || len(p2.Items) != 1 || p2.Items[0].Meta.Name != "z" {
		t.Fatalf("second page: %v %v", p2.Items, err)
	}
	pp, err := s.ListProviders(ctx, "default", store.ListOptions{}, nil)
	if err != nil || len(pp.Items) != 1 || len(pp.Warnings) != 1 {
		t.Fatalf("provider list: %v, %d items, warnings %q", err, len(pp.Items), pp.Warnings)
	}
	_, err = s.GetSandbox(ctx, "default", "m")
	mustKind(t, err, shoal.KindDataLoss)
	if !strings.Contains(err.Error(), s.SandboxKey("default", "m")) {
		t.Fatalf("get: %v does not name the key", err)
	}
	_, err = s.GetProvider(ctx, "default", "bad-p")
	mustKind(t, err, shoal.KindDataLoss)
	_, err = s.UpdateSandbox(ctx, "default", "m", store.Preconditions{}, func(*shoalv1.Sandbox) error { return nil })
	mustKind(t, err, shoal.KindDataLoss)
	if n := s.CorruptRecordsSeen(); n != 2 {
		t.Fatalf("corrupt records seen: %d, want 2 (each reported once)", n)
	}

	// The corrupt provider is still attached to live sandboxes: refused.
	_, _, err = s.DeleteProvider(ctx, "default", "bad-p", store.Preconditions{})
	mustKind(t, err, shoal.KindFailedPrecondition)
	// Delete the corrupt sandbox: gone at once with its attachment keys,
	// and the watch learns the name is free.
	marked, err := s.MarkSandboxDeleting(ctx, "default", "m", store.Preconditions{})
	if err != nil {
		t.Fatalf("delete a corrupt sandbox: %v", err)
	}
	for ev := range events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Type == shoalv1.EventType_DELETED && ev.Object.Meta.Name == "m" {
			if ev.Revision != marked.Meta.ResourceVersion+1 {
				t.Fatalf("DELETED at %d; the delete reported %d, so a wait from it would miss the event", ev.Revision, marked.Meta.ResourceVersion)
			}
			break
		}
	}
	if n := countPrefix(t, c, "/shoal/attach/default/good-p/m") + countPrefix(t, c, "/shoal/attach/default/bad-p/m") + countPrefix(t, c, s.SandboxKey("default", "m")); n != 0 {
		t.Fatalf("%d keys of the corrupt sandbox left", n)
	}
	// Once its users are gone, the corrupt provider can be deleted.
	for _, n := range []string{"a", "z"} {
		if _, _, err := s.DetachProvider(ctx, "default", n, "bad-p", store.Preconditions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleted, _, err := s.DeleteProvider(ctx, "default", "bad-p", store.Preconditions{})
	if err != nil || !deleted {
		t.Fatalf("delete the corrupt provider: deleted=%v %v", deleted, err)
	}
	if _, err := s.CreateProvider(ctx, provider("bad-p")); err != nil {
		t.Fatalf("the name of a removed corrupt provider is free again: %v", err)
	}
}

// A record whose meta contradicts its key (written around shoal) is
// corrupt too: it would otherwise be listed under another name.
func TestMisplacedRecordIsCorrupt(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateSandbox(ctx, sandbox("real")); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, s.SandboxKey("default", "real"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, s.SandboxKey("default", "copy"), string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetSandbox(ctx, "default", "copy")
	mustKind(t, err, shoal.KindDataLoss)
}

// The leader's repairs: an intent whose uid matches no record is removed
// (the name is no longer frozen), and an attachment key of a sandbox that
// does not exist is collected (its provider becomes deletable). Keys that
// are in use are left alone.
func TestRepairsRemoveOnlyStaleKeys(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	if _, err := s.CreateProvider(ctx, provider("p")); err != nil {
		t.Fatal(err)
	}
	live, err := s.CreateSandbox(ctx, sandbox("live", "p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/shoal/deleting/default/live", "not-the-uid"); err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateSandbox(ctx, "default", "live", store.Preconditions{}, func(sb *shoalv1.Sandbox) error { sb.Meta.Labels["x"] = "y"; return nil })
	mustKind(t, err, shoal.KindFailedPrecondition) // frozen by the stale intent
	if _, err := c.Put(ctx, "/shoal/attach/default/p/ghost", "ghost-uid"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.DeleteProvider(ctx, "default", "p", store.Preconditions{})
	mustKind(t, err, shoal.KindFailedPrecondition)

	removed, err := s.CompleteIntent(ctx, "default", "live", "not-the-uid", nil)
	if err != nil || !removed {
		t.Fatalf("stale intent: removed=%v %v", removed, err)
	}
	if _, err := s.UpdateSandbox(ctx, "default", "live", store.Preconditions{}, func(sb *shoalv1.Sandbox) error { sb.Meta.Labels["x"] = "y"; return nil }); err != nil {
		t.Fatalf("update after the repair: %v", err)
	}
	// Keys of an existing sandbox that it does not hold (found in review):
	// another uid, a provider it does not list, and a malformed key.
	if _, err := s.CreateProvider(ctx, provider("q")); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"/shoal/attach/default/q/live":  live.Meta.Uid, // not listed
		"/shoal/release/default/p/live": "wrong-uid",
		"/shoal/attach/default/q/a/b":   "x",
		"/shoal/placed/ghost-node/0":    "default/ghost/uid",
		"/shoal/placed/ghost-node/1":    "default/live/wrong-uid",
	} {
		if _, err := c.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.CollectAttachments(ctx, nil)
	if err != nil || n != 6 {
		t.Fatalf("collect: %d removed, %v; want the 6 keys no sandbox holds", n, err)
	}
	if _, _, err := s.DeleteProvider(ctx, "default", "q", store.Preconditions{}); err != nil {
		t.Fatalf("provider q after the collection: %v", err)
	}
	if countPrefix(t, c, "/shoal/attach/default/p/live") != 1 {
		t.Fatal("the live sandbox's attachment key was collected")
	}
	// A real intent is completed, not removed.
	if _, err := c.Put(ctx, "/shoal/deleting/default/live", live.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	removed, err = s.CompleteIntent(ctx, "default", "live", live.Meta.Uid, nil)
	if err != nil || removed {
		t.Fatalf("real intent: removed=%v %v", removed, err)
	}
	sb, err := s.GetSandbox(ctx, "default", "live")
	if err != nil || sb.Meta.DeletionTimestamp == nil {
		t.Fatalf("real intent not completed: %v %v", sb, err)
	}
}

func FuzzRecordDecoder(f *testing.F) {
	f.Add([]byte("\xff\xfe"), "/shoal/sandboxes/default/a")
	f.Add([]byte{0x0a, 0x05, 0x12, 0x01, 0x61, 0x1a, 0x00}, "/shoal/sandboxes/default/a")
	f.Add([]byte{}, "/shoal/providers/ws/p")
	f.Fuzz(func(t *testing.T, val []byte, key string) {
		kv := &mvccpb.KeyValue{Key: []byte(key), Value: val, ModRevision: 5}
		for _, name := range []string{"sandbox", "provider"} {
			obj, err := store.DecodeForFuzz(name, kv)
			if err != nil {
				if shoal.KindOf(err) != shoal.KindDataLoss {
					t.Fatalf("untyped decode error: %v", err)
				}
				continue
			}
			if m := obj.GetMeta(); m.GetResourceVersion() != 5 || !strings.HasSuffix(key, "/"+m.GetWorkspace()+"/"+m.GetName()) {
				t.Fatalf("decoded %v from key %q", m, key)
			}
		}
	})
}

// The node registry's records, whatever their bytes: a record that does
// not decode, or names another node than its key, is listed by its key's
// id with status.corrupt set, and is Ready only if its registry key holds
// a good record; nodes are listed once each, in order, with a status;
// nothing panics.
func FuzzNodeRecords(f *testing.F) {
	good, err := proto.Marshal(&shoalv1.Node{Name: "n1", Address: "10.0.0.1:7443", Labels: map[string]string{"zone": "a", "shoal.dev/instance": "x"}, MaxSandboxes: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, good, "/shoal/cordon/n1", "/shoal/placed/n1/0", []byte("2026-12-04T10:00:00Z"))
	f.Add([]byte("\xff\x00"), []byte{}, "/shoal/cordon/", "/shoal/placed/", []byte("not a time"))
	f.Add([]byte{0x0a, 0x00}, good, "", "/shoal/placed/n1", []byte{})
	f.Fuzz(func(t *testing.T, info, live []byte, cordon, placed string, lost []byte) {
		kv := func(k string, v []byte) []*mvccpb.KeyValue { return []*mvccpb.KeyValue{{Key: []byte(k), Value: v}} }
		nodes := store.NodesFromForFuzz(kv("/shoal/nodeinfo/n1", info), kv("/shoal/nodes/n1", live), kv(cordon, nil),
			append(kv(placed, nil), kv(placed, nil)...), "/shoal")
		for i, n := range nodes {
			if n.GetName() == "" || n.Status == nil {
				t.Fatalf("listed a node without a name or status: %v", n)
			}
			if i > 0 && nodes[i-1].Name >= n.Name {
				t.Fatalf("not sorted and unique: %q then %q", nodes[i-1].Name, n.Name)
			}
			if n.Status.Sandboxes > 2 {
				t.Fatalf("%d sandboxes counted from 2 placed records", n.Status.Sandboxes)
			}
			if _, ok := n.Labels["shoal.dev/instance"]; ok {
				t.Fatal("the instance label is listed")
			}
			var rec shoalv1.Node
			if n.Status.Ready && (proto.Unmarshal(live, &rec) != nil || rec.Name != n.Name) {
				t.Fatalf("node %s is Ready from a registry key that does not decode as it", n.Name)
			}
		}
		_ = store.ParseLostForFuzz(lost) // an error or a time, never a panic
	})
}
