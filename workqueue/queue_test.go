package workqueue

import (
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
