package registry_test

import (
	"context"
	"testing"
	"time"

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
