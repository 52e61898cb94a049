package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/lease"
	"shoal/store"
)

// Leader-only work stops the moment the lease is lost, and a write fenced
// with the lost term's token is refused.
func TestLeadStopsWhenLeaseLost(t *testing.T) {
	c, _ := testenv.Etcd(t)
	s := store.New(c, store.Options{})
	el, err := lease.New(c, lease.Config{Prefix: s.LeaderPrefix(), ID: "n1", TTL: 2 * time.Second, TermKey: s.LeaderTermKey()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	terms := make(chan *lease.Leadership, 4)
	stopped := make(chan struct{}, 4)
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(lctx context.Context, l *lease.Leadership) error {
			terms <- l
			<-lctx.Done()
			stopped <- struct{}{}
			return nil
		})
	}()
	var first *lease.Leadership
	select {
	case first = <-terms:
	case <-ctx.Done():
		t.Fatal("never became leader")
	}
	// Revoke the lease behind the elector's back.
	resp, err := c.Get(ctx, first.Key())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("leader key: %v", err)
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("lead kept running after the lease was lost")
	}
	select {
	case <-first.Done():
	default:
		t.Fatal("Leadership.Done not closed after loss")
	}
	// The lost term's own fenced write, its record, is refused too.
	if err := first.MarkSynced(ctx); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("lost term's MarkSynced: %v, want ErrNotLeader", err)
	}
	// The elector campaigns again and wins a new term with a new token.
	var second *lease.Leadership
	select {
	case second = <-terms:
	case <-ctx.Done():
		t.Fatal("no second term")
	}
	if second.Rev() == first.Rev() {
		t.Fatal("new term reused the old fencing token")
	}
	// A write fenced with the old token is refused.
	if _, err := s.CreateSandbox(ctx, sandbox()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkSandboxDeleting(ctx, "default", "x", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	sb, _ := s.GetSandbox(ctx, "default", "x")
	if _, err := s.RemoveSandbox(ctx, "default", "x", sb.Meta.Uid, first, 0); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("old-term write: %v, want ErrFenced", err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "x", sb.Meta.Uid, second, 0); err != nil {
		t.Fatalf("current-term write: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
}

func sandbox() *shoalv1.Sandbox {
	return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "x"}, Spec: &shoalv1.SandboxSpec{}}
}
