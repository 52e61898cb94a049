package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/embedetcd"
	"shoal/internal/testenv"
	"shoal/store"
)

// EachSandboxRecord from the watch cache and from etcd: the records'
// creation times and objects are the sandboxes', and a record's derived
// encoding is made once per version of the record: kept while it is
// unchanged, made again when it changes, gone with it, one per record at
// most, and kept by nothing when the list read etcd.
func TestSandboxRecords(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	// Creation times run against key order, a second apart, so that an
	// order read from the index is told from key order.
	base := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	var made int
	now := func() time.Time { made++; return base.Add(-time.Duration(made) * time.Second) }
	c, err := embedetcd.Dial([]string{"http://" + srv.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(c, store.Options{Now: now})
	cache := s.UseCache(store.CacheOptions{})
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Start(cctx) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	<-cache.Ready()
	uncached := store.New(raw, store.Options{})

	const n = 6
	for i := range n {
		sb := sandbox(fmt.Sprintf("r%d", i))
		sb.Meta.Labels["parity"] = fmt.Sprint(i % 2)
		if _, err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "elsewhere", Workspace: "other"}}); err != nil {
		t.Fatal(err)
	}

	var encodes int
	d := store.NewDerivation("test")
	encode := func(sb *shoalv1.Sandbox) ([]byte, error) {
		encodes++
		return []byte(fmt.Sprintf("%s@%d", sb.Meta.Name, sb.Meta.ResourceVersion)), nil
	}
	// list lists the default workspace through st, checks each record
	// against the sandbox, and returns each record's derived encoding.
	list := func(st *store.Store, keep func(*shoalv1.Sandbox) bool) map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		for _, r := range records(t, ctx, st, keep) {
			want, err := s.GetSandbox(ctx, "default", r.Name())
			if err != nil {
				t.Fatal(err)
			}
			if r.Workspace() != "default" || !r.CreatedAt().Equal(want.Meta.CreatedAt.AsTime()) || !proto.Equal(r.Object(), want) {
				t.Fatalf("record %s/%s created %v: %v; the sandbox: %v", r.Workspace(), r.Name(), r.CreatedAt(), r.Object(), want)
			}
			b, err := r.Derived(d, encode)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%s@%d", r.Name(), want.Meta.ResourceVersion); string(b) != got {
				t.Fatalf("derived %q, want %q (the record's version)", b, got)
			}
			out[r.Name()] = b
		}
		return out
	}
	encodesOf := func(what string, f func(), want int) {
		t.Helper()
		encodes = 0
		f()
		if encodes != want {
			t.Fatalf("%s: %d encodings made, want %d", what, encodes, want)
		}
	}

	var first map[string][]byte
	encodesOf("first list", func() { first = list(s, nil) }, n)
	if len(first) != n {
		t.Fatalf("%d records, want %d", len(first), n)
	}
	encodesOf("second list", func() {
		for name, b := range list(s, nil) {
			if &b[0] != &first[name][0] {
				t.Fatalf("%s: encoded again, not kept", name)
			}
		}
	}, 0)
	encodesOf("selector", func() {
		if got := list(s, func(sb *shoalv1.Sandbox) bool { return sb.Meta.Labels["parity"] == "1" }); len(got) != n/2 {
			t.Fatalf("parity=1: %d records, want %d", len(got), n/2)
		}
	}, 0)

	if _, err := s.UpdateSandbox(ctx, "default", "r2", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["changed"] = "yes"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	encodesOf("after an update", func() { list(s, nil) }, 1) // list checks it is the new version's

	encodesOf("another derivation", func() {
		for _, r := range records(t, ctx, s, nil) {
			if _, err := r.Derived(store.NewDerivation("other"), encode); err != nil {
				t.Fatal(err)
			}
		}
	}, n)

	for _, name := range []string{"r0", "r3"} {
		if _, err := raw.Delete(ctx, "/shoal/sandboxes/default/"+name); err != nil {
			t.Fatal(err)
		}
	}
	encodesOf("after deletes", func() {
		if got := list(s, nil); len(got) != n-2 {
			t.Fatalf("%d records after 2 of %d were deleted", len(got), n)
		}
	}, n-2) // the other derivation's replaced d's
	if derived, records := s.DerivedForTest(); derived != n-2 || records != n-1 {
		t.Fatalf("the copy holds %d records, %d with a derived encoding; want %d, %d", records, derived, n-1, n-2)
	}

	// From etcd: the same records; nothing is kept.
	encodesOf("from etcd", func() { list(uncached, nil) }, n-2)
	encodesOf("from etcd again", func() { list(uncached, nil) }, n-2)
}

// records are the records EachSandboxRecord gives of the default
// workspace, which must be in key order.
func records(t *testing.T, ctx context.Context, st *store.Store, keep func(*shoalv1.Sandbox) bool) []store.Record[*shoalv1.Sandbox] {
	t.Helper()
	var out []store.Record[*shoalv1.Sandbox]
	if _, err := st.EachSandboxRecord(ctx, "default", keep, func(r store.Record[*shoalv1.Sandbox]) { out = append(out, r) }); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(out); i++ {
		if out[i-1].Name() >= out[i].Name() {
			t.Fatalf("%s given before %s: not in key order", out[i-1].Name(), out[i].Name())
		}
	}
	return out
}
