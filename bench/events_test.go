package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/store"
)

// What recording events costs the creates that record them: sandbox
// creates per second at 32 clients through a store whose every create
// records Scheduled (written by a real Recorder to the same etcd), and
// through one that records nothing, in alternating rounds on one etcd, so
// that a busy machine weighs on both alike. Each store has its watch
// cache, as a node's has: event writes are revisions outside its prefixes.
func BenchmarkCreatesWithEvents(b *testing.B) {
	const clients = 32
	const window = 3 * time.Second
	c, srv := testenv.Etcd(b)
	rec, err := events.New(events.Config{Node: "bench", Log: store.NewEventLog(c, ""), Burst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Start(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	with, _ := cachedStore(b, c, store.Options{Events: rec})
	without, _ := cachedStore(b, c, store.Options{})
	node := registerIdleNode(b, "http://"+srv.Endpoint())
	run := func(s *store.Store, round int, tag string) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		stop := time.Now().Add(window)
		for k := range clients {
			wg.Go(func() {
				for j := 0; time.Now().Before(stop); j++ {
					_, err := s.CreateSandboxOn(context.Background(), &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("%s%dc%dn%d", tag, round, k, j)},
						Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev"}}, store.Placement{Node: node}, "")
					if err != nil {
						errs <- err
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		// The round's events are written before the next round starts.
		for tick := time.NewTicker(10 * time.Millisecond); rec.Queued() > 0; <-tick.C {
		}
		return float64(n.Load()) / window.Seconds()
	}
	var w, wo float64
	rounds := 3 * b.N
	written := rec.Stats().Written
	b.ResetTimer()
	for round := range rounds {
		w += run(with, round, "w")
		wo += run(without, round, "o")
	}
	b.StopTimer()
	b.ReportMetric(w/float64(rounds), "creates/s-with-events")
	b.ReportMetric(wo/float64(rounds), "creates/s-without")
	b.ReportMetric(w/wo, "ratio")
	if st := rec.Stats(); st.Written == written || st.Dropped["queue_full"] > 0 {
		b.Fatalf("events: %+v", st)
	}
}
