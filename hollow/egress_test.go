package hollow_test

import (
	"context"
	"slices"
	"testing"

	"shoal"
	"shoal/hollow"
)

// Simulated egress sidecars: one is recorded only for a running container
// of the sandbox it names; RemoveEgress drops it, and so does Remove of the
// sandbox's containers, as docker's Remove takes the sidecar.
func TestEgressSidecars(t *testing.T) {
	ctx := context.Background()
	r := hollow.New(hollow.Config{Node: "n1"})
	run := func(uid string) string {
		t.Helper()
		id, err := r.Run(ctx, shoal.ContainerSpec{UID: uid, Name: uid, Command: []string{"agent"}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	sidecars := func() []string {
		t.Helper()
		uids, err := r.EgressSidecars(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return uids
	}
	a, b := run("uid-a"), run("uid-b")
	for _, s := range []shoal.EgressSidecar{{UID: "uid-a", Container: a}, {UID: "uid-b", Container: b}} {
		if err := r.EnsureEgress(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.EnsureEgress(ctx, shoal.EgressSidecar{UID: "uid-a", Container: a}); err != nil {
		t.Fatalf("EnsureEgress again: %v; want nil (idempotent)", err)
	}
	if got := sidecars(); !slices.Equal(got, []string{"uid-a", "uid-b"}) {
		t.Fatalf("sidecars %v; want uid-a and uid-b", got)
	}
	if err := r.EnsureEgress(ctx, shoal.EgressSidecar{UID: "uid-c", Container: a}); err == nil {
		t.Error("a sidecar for uid-c in uid-a's container was recorded")
	}
	if err := r.EnsureEgress(ctx, shoal.EgressSidecar{UID: "uid-x", Container: "nope"}); err == nil {
		t.Error("a sidecar for a container that does not exist was recorded")
	}
	stopped := run("uid-s")
	r.Kill(stopped, 0)
	if err := r.EnsureEgress(ctx, shoal.EgressSidecar{UID: "uid-s", Container: stopped}); err == nil {
		t.Error("a sidecar for a stopped container was recorded")
	}
	if err := r.RemoveEgress(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveEgress(ctx, "uid-none"); err != nil {
		t.Fatalf("RemoveEgress of none: %v; want nil", err)
	}
	if got := sidecars(); !slices.Equal(got, []string{"uid-b"}) {
		t.Fatalf("sidecars after RemoveEgress(uid-a): %v; want uid-b", got)
	}
	if err := r.Remove(ctx, "uid-b"); err != nil {
		t.Fatal(err)
	}
	if got := sidecars(); len(got) != 0 {
		t.Fatalf("sidecars after Remove(uid-b): %v; want none", got)
	}
}
