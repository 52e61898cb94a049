package events_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/tcpproxy"
	"shoal/embedetcd"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/metrics"
	"shoal/store"
)

// The recorder runs against a real embedded etcd, written through the
// store's event log as a node writes it.

func sandbox(name, uid, node string) *shoalv1.Sandbox {
	return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: "default", Name: name, Uid: uid}, Spec: &shoalv1.SandboxSpec{Node: node}}
}

// start runs rec until the test ends, and returns a stop that ends it
// and waits for Start to return.
func start(t *testing.T, rec *events.Recorder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Start(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func newRecorder(t testing.TB, cfg events.Config) *events.Recorder {
	t.Helper()
	if cfg.Node == "" {
		cfg.Node = "n1"
	}
	rec, err := events.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func list(t *testing.T, l *store.EventLog, f store.EventFilter) []*shoalv1.Event {
	t.Helper()
	got, err := l.ListEvents(context.Background(), f, 5000)
	if err != nil {
		t.Fatal(err)
	}
	return got.Items
}

// waitEvents waits until f selects n events, and returns them.
func waitEvents(t *testing.T, l *store.EventLog, f store.EventFilter, n int) []*shoalv1.Event {
	t.Helper()
	var got []*shoalv1.Event
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d events", n), func() (bool, error) {
		got = list(t, l, f)
		return len(got) == n, fmt.Errorf("%d events: %v", len(got), reasonsOf(got))
	})
	return got
}

func reasonsOf(evs []*shoalv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Reason
	}
	return out
}

// counter reads a labelled counter of the node's metrics.
func counter(t *testing.T, m *metrics.Metrics, name, label, value string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if label == "" || hasLabel(s, label, value) {
				return s.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

func hasLabel(s *dto.Metric, name, value string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// What is recorded is written with the recording node, the part of it
// that acted, its severity and details, listed newest last, each key on a
// lease that ends no sooner than a TTL after the event and no later than a
// TTL and a bucket.
func TestRecordedEventsAreWrittenInOrderOnLeases(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	rec := newRecorder(t, events.Config{Node: "n0", Log: l})
	start(t, rec)
	sb := sandbox("agent", "uid-1", "n2")
	t0 := time.Now()
	rec.Record(sb, events.Event{Reason: events.Scheduled, Message: "assigned to node n2", Details: map[string]string{"node": "n2", "why": "spec.node names it"}})
	rec.Record(sb, events.Event{Reason: events.Started, Message: "container abc is running"})
	rec.Record(sb, events.Event{Reason: events.Stopped, Message: "exited 3", Warning: true, Details: map[string]string{"exit_code": "3", "requested": "false"}})
	rec.Record(sandbox("other", "uid-2", "n1"), events.Event{Reason: events.Created})

	got := waitEvents(t, l, store.EventFilter{Workspace: "default", Sandbox: "agent"}, 3)
	if r := reasonsOf(got); strings.Join(r, ",") != "Scheduled,Started,Stopped" {
		t.Fatalf("events %v, want Scheduled, Started, Stopped", r)
	}
	s := got[0]
	if s.ReportingNode != "n0" || s.Reporter != events.ReporterAPI || s.Node != "n2" || s.SandboxUid != "uid-1" || s.Count != 1 ||
		s.Severity != shoalv1.EventSeverity_NORMAL || s.Details["why"] != "spec.node names it" || s.Id == "" || s.ResourceVersion == 0 {
		t.Fatalf("Scheduled as written: %v", s)
	}
	if got[1].Reporter != events.ReporterAgent || got[2].Severity != shoalv1.EventSeverity_WARNING || got[2].Details["exit_code"] != "3" {
		t.Fatalf("Started, Stopped as written: %v, %v", got[1], got[2])
	}
	if all := list(t, l, store.EventFilter{}); len(all) != 4 {
		t.Fatalf("cluster-wide: %v", reasonsOf(all))
	}

	// Every key is on a lease, one per time bucket (at most two buckets
	// here), expiring between TTL and TTL + TTL/12 after the event.
	leases := map[int64]bool{}
	for _, ev := range list(t, l, store.EventFilter{}) {
		resp, err := cli.Get(context.Background(), l.EventKey(ev))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("key of %s: %v", ev.Reason, err)
		}
		leases[resp.Kvs[0].Lease] = true
	}
	if leases[0] || len(leases) > 2 {
		t.Fatalf("leases of the events: %v; want one or two, none 0", leases)
	}
	for id := range leases {
		ttl, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(id))
		if err != nil {
			t.Fatal(err)
		}
		left := time.Duration(ttl.TTL) * time.Second
		if since := time.Since(t0); left < events.DefaultTTL-since-time.Second || left > events.DefaultTTL+events.DefaultTTL/12+time.Second {
			t.Fatalf("lease %x has %s left; want between the TTL (%s) and the TTL plus a bucket", id, left, events.DefaultTTL)
		}
	}
}

// Events expire with their lease: no sooner than the TTL after they
// happened, and nothing but etcd deletes them.
func TestEventsExpireAfterTheTTL(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	const ttl = 3 * time.Second
	rec := newRecorder(t, events.Config{Log: l, TTL: ttl})
	start(t, rec)
	at := time.Now()
	for i := range 20 {
		rec.Record(sandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), "n1"), events.Event{Reason: events.Started, At: at})
	}
	waitEvents(t, l, store.EventFilter{}, 20)
	leases, err := cli.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != 1 {
		t.Fatalf("20 events of one bucket are on %d leases; want 1", len(leases.Leases))
	}
	var gone time.Time
	testenv.Eventually(t, ttl+10*time.Second, "the events expired", func() bool {
		if len(list(t, l, store.EventFilter{})) == 0 {
			gone = time.Now()
			return true
		}
		return false
	})
	if lived := gone.Sub(at); lived < ttl {
		t.Fatalf("events gone %s after they happened; the TTL is %s", lived, ttl)
	}
	t.Logf("events of TTL %s gone %s after they happened", ttl, gone.Sub(at).Round(10*time.Millisecond))
}

// An unbroken run of repeats of an event (same sandbox, reason, message
// and details) within the coalesce window is one key with a count, written
// in place; a repeat after another event is an event of its own, so that
// the history keeps its order.
func TestRepeatsAreCoalesced(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	rec := newRecorder(t, events.Config{Log: l})
	start(t, rec)
	sb := sandbox("flap", "u1", "n1")
	first := time.Now()
	for i := range 30 {
		rec.Record(sb, events.Event{Reason: events.Paused, Message: "container is paused", At: first.Add(time.Duration(i) * time.Second)})
	}
	rec.Record(sb, events.Event{Reason: events.Unpaused, Message: "container was unpaused", At: first.Add(time.Minute)})
	rec.Record(sb, events.Event{Reason: events.Paused, Message: "container is paused", At: first.Add(2 * time.Minute)})
	var got []*shoalv1.Event
	testenv.Eventually(t, 20*time.Second, "Paused x30, Unpaused, Paused", func() (bool, error) {
		got = list(t, l, store.EventFilter{Workspace: "default", Sandbox: "flap"})
		return len(got) == 3 && got[0].Count == 30 && got[2].Count == 1 && got[2].Reason == "Paused", fmt.Errorf("%v", got)
	})
	p := got[0]
	if !p.FirstTime.AsTime().Equal(first) || !p.LastTime.AsTime().Equal(first.Add(29*time.Second)) || got[1].Reason != "Unpaused" {
		t.Fatalf("coalesced event %v; want first %s, last 29s later", p, first)
	}
	if st := rec.Stats(); st.Dropped["rate_limited"] != 0 {
		t.Fatalf("repeats were rate limited: %+v", st)
	}
}

// A sandbox gets at most Burst new keys at once from a node (then one per
// Refill); what is over is dropped and counted, and another sandbox is
// not held back by it.
func TestNewKeysPerSandboxAreBounded(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	m := metrics.New()
	rec := newRecorder(t, events.Config{Log: l, Burst: 5, Refill: time.Hour, Metrics: m})
	start(t, rec)
	for i := range 40 {
		rec.Record(sandbox("noisy", "u1", "n1"), events.Event{Reason: events.Failed, Message: fmt.Sprintf("failure %d", i)})
	}
	rec.Record(sandbox("quiet", "u2", "n1"), events.Event{Reason: events.Started})
	waitEvents(t, l, store.EventFilter{Workspace: "default", Sandbox: "quiet"}, 1)
	if got := list(t, l, store.EventFilter{Workspace: "default", Sandbox: "noisy"}); len(got) != 5 {
		t.Fatalf("the noisy sandbox has %d events; want the burst, 5", len(got))
	}
	testenv.Eventually(t, 10*time.Second, "35 rate limited, 6 written", func() (bool, error) {
		st := rec.Stats()
		return st.Dropped["rate_limited"] == 35 && st.Written == 6, fmt.Errorf("stats %+v", st)
	})
	if v := counter(t, m, "shoal_events_dropped_total", "reason", "rate_limited"); v != 35 {
		t.Fatalf("shoal_events_dropped_total{reason=rate_limited} = %v; want 35", v)
	}
	if v := counter(t, m, "shoal_events_written_total", "", ""); v != 6 {
		t.Fatalf("shoal_events_written_total = %v; want 6", v)
	}
}

// With etcd unreachable, Record never waits: events queue up to the
// queue's size and the rest are dropped and counted; once etcd is back
// the queued ones are written (a node cut off from etcd records its
// Frozen events when it returns).
func TestRecordNeverBlocksWhenEtcdIsUnreachable(t *testing.T) {
	_, srv := testenv.Etcd(t)
	proxy, err := tcpproxy.Start(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cli, err := embedetcd.Dial([]string{proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	l := store.NewEventLog(cli, "")
	m := metrics.New()
	const queue, batch = 100, 10
	rec := newRecorder(t, events.Config{Log: l, QueueSize: queue, MaxBatch: batch, Burst: 100000, WriteTimeout: 300 * time.Millisecond,
		RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond, Metrics: m})
	start(t, rec)
	proxy.SetDown(true)

	const n = 20000
	began := time.Now()
	for i := range n {
		rec.Record(sandbox(fmt.Sprintf("s%d", i%50), fmt.Sprintf("u%d", i%50), "n1"), events.Event{Reason: events.Frozen, Message: fmt.Sprint(i)})
	}
	took := time.Since(began)
	t.Logf("%d Records with etcd unreachable took %s (%s each)", n, took.Round(time.Millisecond), (took / n).Round(time.Nanosecond))
	if took > 2*time.Second {
		t.Fatalf("%d Records took %s with etcd unreachable: Record waited", n, took)
	}
	dropped := rec.Stats().Dropped["queue_full"]
	if dropped < n-queue-batch || dropped > n-queue {
		t.Fatalf("%d dropped for a full queue; want between %d and %d", dropped, n-queue-batch, n-queue)
	}
	if v := counter(t, m, "shoal_events_dropped_total", "reason", "queue_full"); int64(v) != dropped {
		t.Fatalf("shoal_events_dropped_total{reason=queue_full} = %v; want %d", v, dropped)
	}

	proxy.SetDown(false)
	kept := n - int(dropped)
	waitEvents(t, l, store.EventFilter{}, kept)
	if st := rec.Stats(); st.Written != int64(kept) {
		t.Fatalf("written %d; want the %d that were kept", st.Written, kept)
	}
}

// A Once event is written once however many nodes record it (every
// leader records a lost node's Fenced alike).
func TestOnceEventsAreWrittenOnce(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	a := newRecorder(t, events.Config{Node: "a", Log: l})
	b := newRecorder(t, events.Config{Node: "b", Log: l})
	start(t, a)
	start(t, b)
	sb := sandbox("lost", "u1", "n2")
	fenced := store.FencedEvent("n2", time.Now().Add(-time.Minute), 10*time.Second)
	a.Record(sb, fenced)
	waitEvents(t, l, store.EventFilter{}, 1)
	b.Record(sb, fenced)
	b.Record(sb, events.Event{Reason: events.Removed}) // written after b's Fenced attempt
	got := waitEvents(t, l, store.EventFilter{}, 2)
	if got[0].Reason != "Fenced" || got[0].ReportingNode != "a" || got[0].Count != 1 {
		t.Fatalf("events %v; want a's Fenced, once, then b's Removed", got)
	}
	if !got[0].FirstTime.AsTime().Equal(fenced.At) {
		t.Fatalf("Fenced at %s; want the fence time %s", got[0].FirstTime.AsTime(), fenced.At)
	}
}

// Stopping flushes what is queued; what is recorded after is dropped as
// shutdown, never queued for nobody.
func TestStopFlushes(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	rec := newRecorder(t, events.Config{Log: l})
	for i := range 100 {
		rec.Record(sandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), "n1"), events.Event{Reason: events.TornDown})
	}
	stop := start(t, rec)
	stop()
	if got := list(t, l, store.EventFilter{}); len(got) != 100 {
		t.Fatalf("%d events after the stop; want the 100 queued before it", len(got))
	}
	rec.Record(sandbox("late", "u", "n1"), events.Event{Reason: events.Removed})
	if st := rec.Stats(); st.Dropped["shutdown"] != 1 || rec.Queued() != 0 {
		t.Fatalf("after the stop: %+v, %d queued; want the late event dropped as shutdown", st, rec.Queued())
	}
}

// What etcd refuses (here: more ops in one Txn than it allows) is dropped
// and counted, not retried for ever; what it takes afterwards is written.
func TestRefusedWritesAreDropped(t *testing.T) {
	cfg := testenv.EtcdConfig(t, filepath.Join(t.TempDir(), "etcd"))
	cfg.MaxTxnOps = 4
	srv, err := embedetcd.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	l := store.NewEventLog(cli, "")
	m := metrics.New()
	rec := newRecorder(t, events.Config{Log: l, Metrics: m})
	for i := range 10 { // one batch of 10 puts: over etcd's 4
		rec.Record(sandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), "n1"), events.Event{Reason: events.Started})
	}
	start(t, rec)
	testenv.Eventually(t, 20*time.Second, "the batch refused and dropped", func() bool { return rec.Stats().Dropped["refused"] == 10 })
	if v := counter(t, m, "shoal_events_dropped_total", "reason", "refused"); v != 10 {
		t.Fatalf("shoal_events_dropped_total{reason=refused} = %v; want 10", v)
	}
	rec.Record(sandbox("after", "u", "n1"), events.Event{Reason: events.Started})
	waitEvents(t, l, store.EventFilter{}, 1)
}

// A lease etcd lost (revoked, expired, a restore) is granted again.
func TestLostLeaseIsGrantedAgain(t *testing.T) {
	cli, _ := testenv.Etcd(t)
	l := store.NewEventLog(cli, "")
	rec := newRecorder(t, events.Config{Log: l})
	start(t, rec)
	rec.Record(sandbox("a", "u1", "n1"), events.Event{Reason: events.Started})
	waitEvents(t, l, store.EventFilter{}, 1)
	leases, err := cli.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range leases.Leases {
		if _, err := cli.Revoke(context.Background(), ls.ID); err != nil {
			t.Fatal(err)
		}
	}
	rec.Record(sandbox("b", "u2", "n1"), events.Event{Reason: events.Started})
	got := waitEvents(t, l, store.EventFilter{}, 1)
	if got[0].Sandbox != "b" {
		t.Fatalf("after the revoke: %v", got)
	}
}

// The drop reasons are the metric's label values, in one order.
func TestDropReasonsAreTheMetricLabels(t *testing.T) {
	st := newRecorder(t, events.Config{Log: store.NewEventLog(nil, "")}).Stats()
	for _, r := range metrics.EventDropReasons {
		if _, ok := st.Dropped[r]; !ok {
			t.Errorf("drop reason %q of the metric is not counted by the recorder", r)
		}
	}
	if len(st.Dropped) != len(metrics.EventDropReasons) {
		t.Errorf("recorder counts %v; the metric has %v", st.Dropped, metrics.EventDropReasons)
	}
}

// What Record costs its caller: building the event and queueing it. The
// queue holds every event (nothing drains it here), so the figure is the
// caller's alone; BenchmarkRecordAndWrite adds the writer's share.
func BenchmarkRecord(b *testing.B) {
	rec, err := events.New(events.Config{Node: "n1", Log: store.NewEventLog(nil, ""), QueueSize: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	sb := sandbox("bench", "u1", "n1")
	e := events.Event{Reason: events.Started, Message: "container 0123456789ab is running", Details: map[string]string{"container_id": "0123456789ab"}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rec.Record(sb, e)
	}
	b.StopTimer()
	if d := rec.Stats().Dropped["queue_full"]; d != 0 {
		b.Fatalf("%d dropped", d)
	}
}

// Events recorded and written to a real etcd, per event: a thousand
// sandboxes' worth of distinct events, so nothing is coalesced.
func BenchmarkRecordAndWrite(b *testing.B) {
	cli, _ := testenv.Etcd(b)
	l := store.NewEventLog(cli, "")
	rec, err := events.New(events.Config{Node: "n1", Log: l, QueueSize: b.N + 1, Burst: 1 << 30, FlushTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	sbs := make([]*shoalv1.Sandbox, 1000)
	for i := range sbs {
		sbs[i] = sandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), "n1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { done <- rec.Start(ctx) }()
	for i := range b.N {
		rec.Record(sbs[i%len(sbs)], events.Event{Reason: events.Started, Message: fmt.Sprintf("container %d is running", i)})
	}
	cancel() // Start writes what is queued, then returns
	<-done
	b.StopTimer()
	if w := rec.Stats().Written; w != int64(b.N) {
		b.Fatalf("%d of %d written", w, b.N)
	}
}
