package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/tcpproxy"
	"shoal/embedetcd"
	"shoal/internal/testenv"
	"shoal/registry"
	"shoal/store"
)

// A renewal counts from when it was sent, not from when its answer came
// back: with a slow round trip to etcd, the node's view of its lease ends
// no later than etcd's, so a node that freezes on it is never late.
func TestRenewalCountsFromItsSendTime(t *testing.T) {
	_, srv := testenv.Etcd(t)
	proxy, err := tcpproxy.Start(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	c, err := embedetcd.Dial([]string{"http://" + proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r, err := registry.New(registry.Config{Store: store.New(c, store.Options{}), Etcd: c, TTL: 3 * time.Second,
		Instance: "i1", Node: &shoalv1.Node{Name: "n1", Address: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Register(ctx); err != nil {
		t.Fatal(err)
	}
	const oneWay = 300 * time.Millisecond
	proxy.SetLatency(oneWay) // every renewal's round trip takes 600 ms or more
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- r.Start(rctx) }()
	defer func() { stop(); <-done }()
	prev := r.Renewed()
	for renewals := 0; renewals < 2; {
		<-time.After(10 * time.Millisecond) // poll interval
		now, got := time.Now(), r.Renewed()
		if got.Equal(prev) {
			if ctx.Err() != nil {
				t.Fatal("no renewal within a minute")
			}
			continue
		}
		// Seen within 10 ms of its answer: its time is the send time,
		// a round trip before.
		if lag := now.Sub(got); lag < 2*oneWay-50*time.Millisecond {
			t.Errorf("renewal counted from %s before it was seen; its round trip was %s or more: it counts from its answer", lag, 2*oneWay)
		}
		if !r.Held() {
			t.Error("not held right after a renewal")
		}
		prev = got
		renewals++
	}
}

// --replace-node applies to a node's first registration only: a node that
// lost its lease while another installation replaced it is refused when it
// registers again, and stops (Start returns ErrNodeIDTaken) rather than
// run beside its replacement under one id.
func TestReplacedNodeStopsInsteadOfRegisteringAgain(t *testing.T) {
	c, _ := testenv.Etcd(t)
	st := store.New(c, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := registry.New(registry.Config{Store: st, Etcd: c, TTL: time.Second, Instance: "a", Replace: true,
		Node: &shoalv1.Node{Name: "n1", Address: "a:7443"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- a.Start(rctx) }()
	defer func() { stop(); <-done }()

	// b replaces a while a is cut off: a's key is gone (its lease not yet),
	// b takes the id with Replace, then b goes NotReady too.
	key := store.DefaultPrefix + "/nodes/n1"
	got, err := c.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("a's registry key: %v %v", got, err)
	}
	aLease := clientv3.LeaseID(got.Kvs[0].Lease)
	if _, err := c.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	bLease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "b:7443"}, Instance: "b", Replace: true}, bLease.ID); err != nil {
		t.Fatalf("b replaces a: %v", err)
	}
	for _, l := range []clientv3.LeaseID{bLease.ID, aLease} {
		if _, err := c.Revoke(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for {
		select {
		case err := <-done:
			done <- err // for the deferred stop
			if !errors.Is(err, store.ErrNodeIDTaken) || !strings.Contains(err.Error(), "last at b:7443") {
				t.Fatalf("a's Start: %v; want ErrNodeIDTaken naming b", err)
			}
			return
		case <-ctx.Done():
			t.Fatal("a's Start neither stopped nor registered again within a minute")
		case <-time.After(20 * time.Millisecond): // poll interval
		}
		if n, err := st.GetNode(ctx, "n1"); err == nil && n.Status.Ready && n.Address == "a:7443" {
			t.Fatal("a registered again after it was replaced")
		}
	}
}
