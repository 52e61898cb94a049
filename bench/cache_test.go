package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

// The watch cache's figures (docs/benchmarks.md, issue "Scale"): each
// against the raw etcd calls the same work needs, side by side in one run
// on one etcd, interleaved so that both see the same machine.

// cachedStore is a Store with its watch cache running until b ends.
func cachedStore(b *testing.B, c *clientv3.Client, opts ...store.Options) (*store.Store, *store.Cache) {
	b.Helper()
	var o store.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := store.New(c, o)
	cache := s.UseCache(store.CacheOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Start(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	select {
	case <-cache.Ready():
	case <-time.After(time.Minute):
		b.Fatal("the watch cache did not list within a minute")
	}
	return s, cache
}

// benchSandbox is a sandbox record as the store keeps it (about 300 bytes).
func benchSandbox(name string, labels map[string]string) *shoalv1.Sandbox {
	l := map[string]string{"team": "bench", "tier": "scale"}
	for k, v := range labels {
		l[k] = v
	}
	return &shoalv1.Sandbox{
		Meta:   &shoalv1.ObjectMeta{Name: name, Workspace: "default", Uid: uuid.NewString(), Labels: l, CreatedAt: timestamppb.Now()},
		Spec:   &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Node: "elsewhere", Env: map[string]string{"MODE": "bench"}},
		Status: &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Node: "elsewhere", Message: "running"},
	}
}

// fill writes n sandbox records straight to etcd, a Txn of 100 at a time;
// every hundredth carries the label sel=yes.
func fill(b *testing.B, c *clientv3.Client, s *store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	var ops []clientv3.Op
	for i := range n {
		labels := map[string]string{}
		if i%100 == 0 {
			labels["sel"] = "yes"
		}
		sb := benchSandbox(fmt.Sprintf("s%06d", i), labels)
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(sb)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(s.SandboxKey("default", sb.Meta.Name), string(v)))
		if len(ops) == 100 || i == n-1 {
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
}

// waitCached waits until the cache holds n sandboxes.
func waitCached(b *testing.B, cache *store.Cache, n int) {
	b.Helper()
	testenv.Eventually(b, 2*time.Minute, fmt.Sprintf("the cache holding %d sandboxes", n), func() error {
		if got := cache.Stats().Sandboxes; got < n {
			return fmt.Errorf("it holds %d", got)
		}
		return nil
	})
}

// A consistent Get served from the cache vs a raw linearizable etcd Get
// of the same record, decoded.
func BenchmarkCachedGetVsRaw(b *testing.B) {
	c, _ := testenv.Etcd(b)
	s, cache := cachedStore(b, c)
	ctx := context.Background()
	if _, err := s.CreateSandbox(ctx, benchSandbox("g", nil)); err != nil {
		b.Fatal(err)
	}
	key := s.SandboxKey("default", "g")
	var tCache, tRaw time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := s.GetSandbox(ctx, "default", "g"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		resp, err := c.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatal(err)
		}
		var sb shoalv1.Sandbox
		if err := proto.Unmarshal(resp.Kvs[0].Value, &sb); err != nil {
			b.Fatal(err)
		}
		tRaw += time.Since(t1)
		tCache += t1.Sub(t0)
	}
	b.StopTimer()
	if st := cache.Stats(); st.Fallbacks != 0 {
		b.Fatalf("%d gets fell back to etcd", st.Fallbacks)
	}
	b.ReportMetric(float64(tCache.Nanoseconds())/float64(b.N), "cache-ns/op")
	b.ReportMetric(float64(tRaw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(tCache)/float64(tRaw), "ratio")
}

// A List of 10,000 sandboxes in pages of 500 from the cache vs the raw
// paged range read (at one revision) and decode of the same keys; and a
// List with a selector matching 1% of them vs the same raw full read.
func BenchmarkCachedListVsRaw(b *testing.B) {
	// 200 samples each: a p99 of fewer than 100 is the maximum, one GC
	// pause in the run.
	const n, pageSize, samples = 10000, 500, 200
	c, _ := testenv.Etcd(b)
	s, cache := cachedStore(b, c)
	fill(b, c, s, n)
	waitCached(b, cache, n)
	ctx := context.Background()
	prefix := s.SandboxKey("default", "")
	end := clientv3.GetPrefixRangeEnd(prefix)
	rawList := func() int {
		got, from, rev := 0, prefix, int64(0)
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := c.Get(ctx, from, opts...)
			if err != nil {
				b.Fatal(err)
			}
			rev = resp.Header.Revision
			for _, kv := range resp.Kvs {
				var sb shoalv1.Sandbox
				if err := proto.Unmarshal(kv.Value, &sb); err != nil {
					b.Fatal(err)
				}
				got++
			}
			if !resp.More {
				return got
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	cachedList := func() int {
		got := 0
		o := store.ListOptions{Limit: pageSize}
		for {
			page, err := s.ListSandboxes(ctx, "default", o, nil)
			if err != nil {
				b.Fatal(err)
			}
			got += len(page.Items)
			if page.Next == nil {
				return got
			}
			o = *page.Next
		}
	}
	rawSelect := func() int {
		resp, err := c.Get(ctx, prefix, clientv3.WithRange(end))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, kv := range resp.Kvs {
			var sb shoalv1.Sandbox
			if err := proto.Unmarshal(kv.Value, &sb); err != nil {
				b.Fatal(err)
			}
			if sb.Meta.Labels["sel"] == "yes" {
				got++
			}
		}
		return got
	}
	cachedSelect := func() int {
		page, err := s.ListSandboxes(ctx, "default", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool { return sb.Meta.Labels["sel"] == "yes" })
		if err != nil {
			b.Fatal(err)
		}
		return len(page.Items)
	}
	var lc, lr, sc, sr []time.Duration
	b.ResetTimer()
	for range b.N * samples {
		for _, m := range []struct {
			f    func() int
			want int
			into *[]time.Duration
		}{{cachedList, n, &lc}, {rawList, n, &lr}, {cachedSelect, n / 100, &sc}, {rawSelect, n / 100, &sr}} {
			t0 := time.Now()
			if got := m.f(); got != m.want {
				b.Fatalf("listed %d, want %d", got, m.want)
			}
			*m.into = append(*m.into, time.Since(t0))
		}
	}
	b.StopTimer()
	if st := cache.Stats(); st.Fallbacks != 0 {
		b.Fatalf("%d lists fell back to etcd", st.Fallbacks)
	}
	b.ReportMetric(float64(percentile(lc, 0.99).Microseconds()), "cache-list-p99-µs")
	b.ReportMetric(float64(percentile(lr, 0.99).Microseconds()), "raw-list-p99-µs")
	b.ReportMetric(float64(percentile(lc, 0.99))/float64(percentile(lr, 0.99)), "list-p99-ratio")
	b.ReportMetric(float64(percentile(sc, 0.99).Microseconds()), "cache-select-p99-µs")
	b.ReportMetric(float64(percentile(sr, 0.99).Microseconds()), "raw-full-read-p99-µs")
	b.ReportMetric(float64(percentile(sc, 0.99))/float64(percentile(sr, 0.99)), "select-p99-ratio")
	// Medians beside the p99s: with 200 samples a p99 is the second
	// worst, one GC pause or scheduling stall on a loaded machine.
	b.ReportMetric(float64(percentile(lc, 0.5).Microseconds()), "cache-list-p50-µs")
	b.ReportMetric(float64(percentile(lr, 0.5).Microseconds()), "raw-list-p50-µs")
	b.ReportMetric(float64(percentile(sc, 0.5).Microseconds()), "cache-select-p50-µs")
	b.ReportMetric(float64(percentile(sr, 0.5).Microseconds()), "raw-full-read-p50-µs")
}

// Sandbox creates per second at 64 clients through the store (the update
// loop, placement on a registered node, the attachment and slot keys) vs
// raw create Txns (a compare that the key is absent and a Put) at 64
// clients on the same etcd.
func BenchmarkCreatesAt64Clients(b *testing.B) {
	const clients = 64
	const window = 3 * time.Second
	c, srv := testenv.Etcd(b)
	s, _ := cachedStore(b, c)
	node := registerIdleNode(b, "http://"+srv.Endpoint())
	ctx := context.Background()
	run := func(round int, create func(name string) error) float64 {
		var done atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(window)
		errs := make(chan error, clients)
		for k := range clients {
			wg.Go(func() {
				for j := 0; time.Now().Before(stop); j++ {
					if err := create(fmt.Sprintf("r%dc%dn%d", round, k, j)); err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(done.Load()) / window.Seconds()
	}
	viaStore := func(name string) error {
		_, err := s.CreateSandboxOn(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "st-" + name}, Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev"}},
			store.Placement{Node: node}, "")
		return err
	}
	raw := func(name string) error {
		sb := benchSandbox("raw-"+name, nil)
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(sb)
		if err != nil {
			return err
		}
		key := s.SandboxKey("default", sb.Meta.Name)
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(v))).Commit()
		if err == nil && !resp.Succeeded {
			err = fmt.Errorf("raw create of %s refused", key)
		}
		return err
	}
	var st, rw float64
	rounds := 3 * b.N
	b.ResetTimer()
	for round := range rounds {
		st += run(round, viaStore)
		rw += run(round, raw)
	}
	b.ReportMetric(st/float64(rounds), "store-creates/s")
	b.ReportMetric(rw/float64(rounds), "raw-creates/s")
	b.ReportMetric(st/rw, "ratio")
}

// A hundred client watches on one store: the etcd watches its cache opened.
func BenchmarkClientWatches(b *testing.B) {
	c, _ := testenv.Etcd(b)
	s, cache := cachedStore(b, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range b.N {
		var chans []<-chan store.Event[*shoalv1.Sandbox]
		for range 100 {
			chans = append(chans, s.WatchSandboxes(ctx, "", "", 0))
		}
		name := fmt.Sprintf("w%d", time.Now().UnixNano())
		if _, err := s.CreateSandbox(ctx, benchSandbox(name, nil)); err != nil {
			b.Fatal(err)
		}
		for _, ch := range chans {
			for e := range ch {
				if e.Err != nil {
					b.Fatal(e.Err)
				}
				if e.Object.Meta.Name == name {
					break
				}
			}
		}
	}
	st := cache.Stats()
	b.ReportMetric(float64(st.EtcdWatches), "etcd-watches")
	b.ReportMetric(float64(st.ClientWatches), "client-watches")
}

// Memory of 10,000 cached sandboxes: the live heap of this process before
// and after a cache lists them (etcd, embedded here, holds them already,
// so the difference is the cache's copy). SHOAL_BENCH_HEAP_PROFILE=<file>
// writes the heap profile with the cache listed.
func BenchmarkCacheMemory(b *testing.B) {
	const n = 10000
	for range b.N {
		b.StopTimer()
		c, _ := testenv.Etcd(b)
		fill(b, c, store.New(c, store.Options{}), n)
		before := liveHeap()
		_, cache := cachedStore(b, c)
		waitCached(b, cache, n)
		after := liveHeap()
		if path := os.Getenv("SHOAL_BENCH_HEAP_PROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		b.ReportMetric(float64(after-before)/(1<<20), "MiB/10k-sandboxes")
		b.ReportMetric(float64(after-before)/n, "bytes/sandbox")
		runtime.KeepAlive(cache)
	}
}

// writeHeapProfile writes the live heap's profile to path (go tool pprof
// -sample_index=inuse_space): where the cache's bytes are.
func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
