package workqueue

import (
	"context"
	"testing"
	"time"
)

func TestDedupAndRequeueWhileInflight(t *testing.T) {
	q := New(func(s string) string { return s })
	q.Add("a")
	q.Add("a")
	q.Add("b")
	if q.Len() != 2 {
		t.Fatalf("len %d, want 2 (dedup)", q.Len())
	}
	a, _ := q.Get()
	q.Add("a") // in flight: runs again after Done
	if q.Len() != 1 {
		t.Fatalf("in-flight add queued at once: len %d", q.Len())
	}
	q.Done(a, 0)
	b, _ := q.Get()
	a2, _ := q.Get()
	if b != "b" || a2 != "a" {
		t.Fatalf("order %q %q", b, a2)
	}
	q.Done(b, 0)
	q.Done(a2, time.Millisecond)
	got := make(chan string)
	go func() { v, _ := q.Get(); got <- v }()
	select {
	case v := <-got:
		if v != "a" {
			t.Fatalf("retry delivered %q", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("retry never delivered")
	}
	q.Close()
	if _, ok := q.Get(); ok {
		t.Fatal("Get after Close returned an item")
	}
}

func TestRunRetriesAndStops(t *testing.T) {
	q := New(func(s string) string { return s })
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan string, 16)
	tries := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(ctx, 2, func(s string) time.Duration {
			seen <- s
			if s == "flaky" {
				tries[s]++ // only one worker holds an item at a time
				if tries[s] < 3 {
					return time.Millisecond
				}
			}
			return 0
		})
	}()
	q.Add("a")
	q.Add("flaky")
	got := map[string]int{}
	for got["a"] < 1 || got["flaky"] < 3 {
		select {
		case s := <-seen:
			got[s]++
		case <-time.After(10 * time.Second):
			t.Fatalf("handled %v; want a once and flaky three times", got)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
}

func TestRetryBackoffGrowsPerKeyAndResets(t *testing.T) {
	q := New(func(s string) string { return s })
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, MaxRetryDelay, MaxRetryDelay}
	for i, w := range want {
		if got := q.backoff("bad", time.Second); got != w {
			t.Fatalf("retry %d of a failing key: delay %s, want %s", i+1, got, w)
		}
	}
	if got := q.backoff("other", time.Second); got != time.Second {
		t.Fatalf("another key shares the failing key's backoff: %s", got)
	}
	if got := q.backoff("bad", 0); got != 0 {
		t.Fatalf("success returned delay %s", got)
	}
	if got := q.backoff("bad", time.Second); got != time.Second {
		t.Fatalf("after a success the backoff did not reset: %s", got)
	}
}
