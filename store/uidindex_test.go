package store_test

import (
	"testing"

	"shoal"
	"shoal/internal/testenv"
	"shoal/store"
)

// A sandbox's uid names it through the watch cache's index: a uid the
// copy holds is answered without a read (no cache read counted), one made
// a moment ago through another node is found once the copy caught up, a
// removed sandbox's uid and a replacement's old uid are NOT_FOUND, and a
// store without a cache finds it in etcd.
func TestSandboxRefByUID(t *testing.T) {
	t.Parallel()
	_, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	a, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	b, bCache, _ := cachedNode(t, "http://"+srv.Endpoint())

	sb, err := a.CreateSandbox(ctx, sandbox("by-uid"))
	if err != nil {
		t.Fatal(err)
	}
	uid := sb.Meta.Uid
	// Made through a: b finds it once its copy has caught up.
	ws, name, err := b.SandboxRefByUID(ctx, uid)
	if err != nil || ws != "default" || name != "by-uid" {
		t.Fatalf("b by uid: %q %q %v", ws, name, err)
	}
	// Held now: no read of the cache (and none of etcd).
	before := bCache.Stats().Served
	for range 10 {
		if _, _, err := b.SandboxRefByUID(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if got := bCache.Stats().Served; got != before {
		t.Fatalf("lookups of a held uid read the cache %d times", got-before)
	}
	_, _, err = b.SandboxRefByUID(ctx, "0000-not-a-uid")
	mustKind(t, err, shoal.KindNotFound)

	// Removed and made again under the same name: the old uid is gone,
	// the new one names it.
	if _, err := a.MarkSandboxDeleting(ctx, "default", "by-uid", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RemoveSandbox(ctx, "default", "by-uid", uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	repl, err := a.CreateSandbox(ctx, sandbox("by-uid"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.SandboxRefByUID(ctx, uid)
	mustKind(t, err, shoal.KindNotFound)
	if _, name, err := b.SandboxRefByUID(ctx, repl.Meta.Uid); err != nil || name != "by-uid" {
		t.Fatalf("replacement by uid: %q %v", name, err)
	}

	// Without a cache: etcd.
	plain, _ := newStore(t)
	sb2, err := plain.CreateSandbox(ctx, sandbox("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if _, name, err := plain.SandboxRefByUID(ctx, sb2.Meta.Uid); err != nil || name != "plain" {
		t.Fatalf("without a cache: %q %v", name, err)
	}
	_, _, err = plain.SandboxRefByUID(ctx, uid)
	mustKind(t, err, shoal.KindNotFound)
}
