package store_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// clock is a settable store clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func pending(t *testing.T, err error, node string, lost bool) *store.OwnerPending {
	t.Helper()
	var p *store.OwnerPending
	if !errors.As(err, &p) || p.Node != node || p.Lost != lost {
		t.Fatalf("RemoveSandbox: %v; want OwnerPending{node %s, lost %v}", err, node, lost)
	}
	return p
}

// The leader's removal needs the owner's proof: the owner's teardown
// record for this uid, or the owner lost for longer than the fence margin,
// or an owner the cluster never knew. A node that is back voids a loss.
func TestRemovalNeedsTheOwnersProof(t *testing.T) {
	t.Parallel()
	s0, c := newStore(t)
	clk := &clock{t: time.Now()}
	s := store.New(c, store.Options{Now: clk.now})
	ctx := ctxT(t)
	l1 := register(t, s, c, "n1", 0, nil)
	l2 := register(t, s0, c, "n2", 0, nil)
	create := func(name, node string) *shoalv1.Sandbox {
		t.Helper()
		sb, err := s.CreateSandboxOn(ctx, sandbox(name), store.Placement{Node: node}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkSandboxDeleting(ctx, "default", name, store.Preconditions{}); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	const margin = 10 * time.Second

	// A live owner: only its record for this very uid will do.
	a := create("a", "n1")
	pending(t, firstErr(s.RemoveSandbox(ctx, "default", "a", a.Meta.Uid, nil, margin)), "n1", false)
	if err := s.RecordTeardown(ctx, "default", "a", "some-other-uid"); err != nil {
		t.Fatal(err)
	}
	pending(t, firstErr(s.RemoveSandbox(ctx, "default", "a", a.Meta.Uid, nil, margin)), "n1", false)
	if err := s.RecordTeardown(ctx, "default", "a", a.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if rev, err := s.RemoveSandbox(ctx, "default", "a", a.Meta.Uid, nil, margin); err != nil || rev == 0 {
		t.Fatalf("removal with the owner's record: rev %d, %v", rev, err)
	}
	if resp, _ := c.Get(ctx, "/shoal/torndown/", clientv3.WithPrefix()); len(resp.Kvs) != 0 {
		t.Fatalf("the removal left teardown records: %v", resp.Kvs)
	}
	// A record for a sandbox that is gone is not written.
	if err := s.RecordTeardown(ctx, "default", "a", a.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.Get(ctx, "/shoal/torndown/", clientv3.WithPrefix()); len(resp.Kvs) != 0 {
		t.Fatal("a teardown record was written for a removed sandbox")
	}

	// A lost owner: nothing until the loss is recorded, then the margin.
	b := create("b", "n2")
	u := create("u", "n2")
	if _, err := c.Revoke(ctx, l2); err != nil {
		t.Fatal(err)
	}
	pending(t, firstErr(s.RemoveSandbox(ctx, "default", "b", b.Meta.Uid, nil, margin)), "n2", true)
	since, err := s.MarkNodeLost(ctx, "n2", nil)
	if err != nil || !since.Equal(clk.now()) {
		t.Fatalf("MarkNodeLost: %v, %v (clock %v)", since, err, clk.now())
	}
	if again, err := s.MarkNodeLost(ctx, "n2", nil); err != nil || !again.Equal(since) {
		t.Fatalf("a second MarkNodeLost moved the loss: %v, %v", again, err)
	}
	clk.add(margin / 2)
	p := pending(t, firstErr(s.RemoveSandbox(ctx, "default", "b", b.Meta.Uid, nil, margin)), "n2", true)
	if p.Wait <= 0 || p.Wait > margin/2 {
		t.Fatalf("wait %s; want (0, %s]", p.Wait, margin/2)
	}
	nodes, _ := s.Nodes(ctx)
	for _, n := range nodes {
		if n.Name == "n2" && (n.Status.Ready || n.Status.LastSeen == nil) {
			t.Fatalf("lost node listed as %v", n.Status)
		}
	}
	clk.add(margin / 2)
	if rev, err := s.RemoveSandbox(ctx, "default", "b", b.Meta.Uid, nil, margin); err != nil || rev == 0 {
		t.Fatalf("removal past the fence time: rev %d, %v", rev, err)
	}

	// The owner comes back past its fence time: its registration voids the
	// loss, and the removal waits for it again.
	register(t, s0, c, "n2", 0, nil)
	pending(t, firstErr(s.RemoveSandbox(ctx, "default", "u", u.Meta.Uid, nil, margin)), "n2", false)

	// A node the cluster never knew ran nothing.
	ghost := sandbox("g")
	ghost.Status = &shoalv1.SandboxStatus{Node: "never-registered"}
	g, err := s.CreateSandbox(ctx, ghost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkSandboxDeleting(ctx, "default", "g", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "g", g.Meta.Uid, nil, margin); err != nil {
		t.Fatalf("removal of a sandbox of an unknown node: %v", err)
	}
	_ = l1
}

// A lost node's live sandboxes become UNKNOWN with condition NodeLost;
// once the node is back, nothing is marked any more; removing a Ready node
// is refused, and a NotReady one is forgotten once no sandbox names it.
func TestNodeLossAndRemoval(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	l := register(t, s, c, "n1", 0, nil)
	for _, name := range []string{"x", "y"} {
		if _, err := s.CreateSandboxOn(ctx, sandbox(name), store.Placement{Node: "n1"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MarkSandboxDeleting(ctx, "default", "y", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetNode(ctx, "n1"); err == nil {
		t.Fatal("a Ready node was accepted for removal")
	}
	if since, err := s.MarkNodeLost(ctx, "n1", nil); err != nil || !since.IsZero() {
		t.Fatalf("a live node was marked lost: %v, %v", since, err)
	}
	if _, err := c.Revoke(ctx, l); err != nil {
		t.Fatal(err)
	}
	since, err := s.MarkNodeLost(ctx, "n1", nil)
	if err != nil || since.IsZero() {
		t.Fatalf("MarkNodeLost: %v, %v", since, err)
	}
	n, err := s.MarkSandboxesUnknown(ctx, "n1", since, nil)
	if err != nil || n != 1 {
		t.Fatalf("MarkSandboxesUnknown: %d, %v; want 1 (y is being deleted)", n, err)
	}
	x, _ := s.GetSandbox(ctx, "default", "x")
	if x.Status.Phase != shoalv1.SandboxPhase_UNKNOWN || len(x.Status.Conditions) == 0 ||
		x.Status.Conditions[len(x.Status.Conditions)-1].Type != store.ConditionNodeLost {
		t.Fatalf("x after the loss: %v", x.Status)
	}
	if n, err := s.MarkSandboxesUnknown(ctx, "n1", since, nil); err != nil || n != 0 {
		t.Fatalf("marking again: %d, %v", n, err)
	}
	// A node back before its sandboxes are marked: nothing is marked (the
	// first write fails its compare on the node's key, the next reads it).
	l2 := register(t, s, c, "n2", 0, nil)
	if _, err := s.CreateSandboxOn(ctx, sandbox("z"), store.Placement{Node: "n2"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, l2); err != nil {
		t.Fatal(err)
	}
	since2, err := s.MarkNodeLost(ctx, "n2", nil)
	if err != nil || since2.IsZero() {
		t.Fatalf("MarkNodeLost(n2): %v, %v", since2, err)
	}
	register(t, s, c, "n2", 0, nil)
	if n, err := s.MarkSandboxesUnknown(ctx, "n2", since2, nil); err != nil || n != 0 {
		t.Fatalf("marking the sandboxes of a node that is back: %d, %v", n, err)
	}
	if z, _ := s.GetSandbox(ctx, "default", "z"); z.GetStatus().GetPhase() == shoalv1.SandboxPhase_UNKNOWN {
		t.Fatal("a sandbox of a node that is back was marked UNKNOWN")
	}

	// Forget: refused for an unknown node; recorded for n1; completed only
	// once no sandbox names it.
	if err := s.ForgetNode(ctx, "nope"); err == nil {
		t.Fatal("an unknown node was accepted for removal")
	}
	if err := s.ForgetNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if gone, left, err := s.CompleteForget(ctx, "n1", nil); err != nil || gone || left != 2 {
		t.Fatalf("CompleteForget with sandboxes left: %v %d %v", gone, left, err)
	}
	for _, name := range []string{"x", "y"} {
		sb, _ := s.GetSandbox(ctx, "default", name)
		if _, err := s.MarkSandboxDeleting(ctx, "default", name, store.Preconditions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RemoveSandbox(ctx, "default", name, sb.Meta.Uid, nil, 0); err != nil {
			t.Fatalf("removal with a zero margin: %v", err)
		}
	}
	if gone, _, err := s.CompleteForget(ctx, "n1", nil); err != nil || !gone {
		t.Fatalf("CompleteForget: %v %v", gone, err)
	}
	if _, err := s.GetNode(ctx, "n1"); err == nil {
		t.Fatal("the forgotten node is still listed")
	}
	if resp, _ := c.Get(ctx, "/shoal/lost/", clientv3.WithPrefix()); len(resp.Kvs) != 0 {
		t.Fatal("the forgotten node's loss record remains")
	}
}

func firstErr(_ int64, err error) error { return err }
