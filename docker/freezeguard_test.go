package docker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The guard's order: a freeze waits for the execs starting; an exec that
// asks while a freeze waits starts after it; entries do not outlive their
// holders; a cancelled wait holds nothing.
func TestFreezeGuardOrder(t *testing.T) {
	var g freezeGuard
	ctx := context.Background()
	exec1, err := g.starting(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	froze := make(chan func())
	go func() {
		release, err := g.freezing(ctx, "c")
		if err != nil {
			t.Error(err)
		}
		froze <- release
	}()
	// The freeze must be queued before the second exec asks: until then
	// the second exec would (rightly) go first. A short-deadline freezing
	// call cannot tell, so wait for the queued waiter through the entry.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		refs := g.ids["c"].refs
		g.mu.Unlock()
		if refs == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the freeze never queued")
		}
		<-time.After(time.Millisecond)
	}
	exec2 := make(chan func())
	go func() {
		release, err := g.starting(ctx, "c")
		if err != nil {
			t.Error(err)
		}
		exec2 <- release
	}()
	select {
	case <-froze:
		t.Fatal("the freeze went ahead of an exec that was starting")
	case <-exec2:
		t.Fatal("an exec started ahead of a waiting freeze")
	case <-time.After(50 * time.Millisecond):
	}
	exec1()
	exec1() // idempotent
	unfreeze := <-froze
	select {
	case <-exec2:
		t.Fatal("an exec started during the freeze")
	case <-time.After(50 * time.Millisecond):
	}
	unfreeze()
	(<-exec2)()

	// Another container's guard is its own.
	a, err := g.freezing(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.starting(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	// A wait that is given up holds nothing.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.starting(cctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an exec during a freeze, its context ending: %v", err)
	}
	a()
	b()
	if n := g.held(); n != 0 {
		t.Fatalf("%d guard entries left with no holder", n)
	}
}
