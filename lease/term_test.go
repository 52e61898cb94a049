package lease_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal/internal/testenv"
	"shoal/lease"
	"shoal/store"
)

// Anyone can read who leads, with the fencing token and since when; a term
// record left by an earlier term gives no "since" to the current one.
func TestCurrentTerm(t *testing.T) {
	c, _ := testenv.Etcd(t)
	s := store.New(c, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, ok, err := lease.Current(ctx, c, s.LeaderPrefix(), s.LeaderTermKey()); err != nil || ok {
		t.Fatalf("before any election: ok %v, err %v; want nobody leading", ok, err)
	}
	el, err := lease.New(c, lease.Config{Prefix: s.LeaderPrefix(), TermKey: s.LeaderTermKey(), ID: "n1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	terms := make(chan *lease.Leadership, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- el.Run(rctx, func(lctx context.Context, l *lease.Leadership) error {
			terms <- l
			<-lctx.Done()
			return nil
		})
	}()
	defer func() { stop(); <-done }()
	var l *lease.Leadership
	select {
	case l = <-terms:
	case <-ctx.Done():
		t.Fatal("never became leader")
	}
	// The record is written just after the win; poll for it.
	var term lease.Term
	testenv.Eventually(t, 10*time.Second, "the term recorded", func() (bool, error) {
		var ok bool
		term, ok, err = lease.Current(ctx, c, s.LeaderPrefix(), s.LeaderTermKey())
		return ok && !term.Since.IsZero(), err
	})
	if term.Node != "n1" || term.Key != l.Key() || term.Fence != l.Rev() || term.Since.Before(before.Add(-time.Second)) {
		t.Fatalf("current term %+v; want n1 at %s@%d since about %s", term, l.Key(), l.Rev(), before)
	}
	// The leader marks when it caught up: Synced, Since kept.
	if !term.Synced.IsZero() {
		t.Fatalf("synced before MarkSynced: %+v", term)
	}
	if err := l.MarkSynced(ctx); err != nil {
		t.Fatal(err)
	}
	synced, ok, err := lease.Current(ctx, c, s.LeaderPrefix(), s.LeaderTermKey())
	if err != nil || !ok || synced.Synced.Before(term.Since) || !synced.Since.Equal(term.Since) || synced.Fence != term.Fence {
		t.Fatalf("after MarkSynced: %+v (%v %v); want since %s kept and synced after it", synced, ok, err, term.Since)
	}
	// A stale record (of another fence) does not date the current term,
	// and the serializable read says the same as the linearizable one.
	if _, err := c.Put(ctx, s.LeaderTermKey(), `{"node":"old","fence":1,"since":"2020-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	term, ok, err = lease.Current(ctx, c, s.LeaderPrefix(), s.LeaderTermKey(), clientv3.WithSerializable())
	if err != nil || !ok || term.Node != "n1" || !term.Since.IsZero() || !term.Synced.IsZero() {
		t.Fatalf("with a stale record: %+v, %v, %v; want n1 with no since", term, ok, err)
	}
}

// A graceful stop gives the term up at once: the election key and the
// term record (on the term's lease) are gone when Run returns, not a TTL
// later.
func TestGracefulStopRevokesTheTerm(t *testing.T) {
	c, _ := testenv.Etcd(t)
	s := store.New(c, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	el, err := lease.New(c, lease.Config{Prefix: s.LeaderPrefix(), TermKey: s.LeaderTermKey(), ID: "n1", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- el.Run(rctx, func(lctx context.Context, l *lease.Leadership) error {
			<-lctx.Done()
			return nil
		})
	}()
	testenv.Eventually(t, 10*time.Second, "the term recorded", func() (bool, error) {
		term, ok, err := lease.Current(ctx, c, s.LeaderPrefix(), s.LeaderTermKey())
		return ok && !term.Since.IsZero(), err
	})
	stop()
	<-done
	resp, err := c.Get(ctx, s.LeaderTermKey())
	if err != nil {
		t.Fatal(err)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 || len(leases.Leases) != 0 {
		t.Fatalf("after a graceful stop: term record %v, leases %v; want both gone", resp.Kvs, leases.Leases)
	}
}
