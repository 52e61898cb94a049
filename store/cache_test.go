package store_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/tcpproxy"
	"shoal/embedetcd"
	"shoal/internal/testenv"
	"shoal/store"
)

// cachedNode is what a node has of the store: its own etcd client (to
// endpoint), a Store over it and that Store's watch cache, running until
// the test ends.
func cachedNode(t *testing.T, endpoint string) (*store.Store, *store.Cache, *clientv3.Client) {
	t.Helper()
	c, err := embedetcd.Dial([]string{endpoint})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(c, store.Options{})
	cache := s.UseCache(store.CacheOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	select {
	case <-cache.Ready():
	case <-time.After(time.Minute):
		t.Fatal("the watch cache did not list within a minute")
	}
	return s, cache, c
}

// Writes through one node, reads through another that serves them from
// its cache: every read started after a write finished sees it (read
// your writes across nodes), and no reader sees a version go back
// (monotonic reads); writes outside the cached prefixes move etcd's
// revision without an event, which the reads must wait out too.
func TestCacheReadsAreLinearizableAcrossNodes(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	a, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	b, bCache, _ := cachedNode(t, "http://"+srv.Endpoint())
	if _, err := a.CreateSandbox(ctx, sandbox("rw")); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64 // the newest write a finished, as its label value
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 16)
	for r := range 3 {
		wg.Go(func() {
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				want := acked.Load()
				var got int64
				var rv int64
				if r == 2 {
					page, err := b.ListSandboxes(ctx, "", store.ListOptions{}, nil)
					if err != nil || len(page.Items) != 1 {
						errs <- fmt.Errorf("list through b: %v (%d items)", err, len(page.Items))
						return
					}
					got, _ = strconv.ParseInt(page.Items[0].Meta.Labels["seq"], 10, 64)
					rv = page.Items[0].Meta.ResourceVersion
				} else {
					sb, err := b.GetSandbox(ctx, "default", "rw")
					if err != nil {
						errs <- fmt.Errorf("get through b: %v", err)
						return
					}
					got, _ = strconv.ParseInt(sb.Meta.Labels["seq"], 10, 64)
					rv = sb.Meta.ResourceVersion
				}
				if got < want {
					errs <- fmt.Errorf("reader %d: read seq %d after the write of seq %d had finished (stale read)", r, got, want)
					return
				}
				if rv < last {
					errs <- fmt.Errorf("reader %d: resource_version went back from %d to %d", r, last, rv)
					return
				}
				last = rv
			}
		})
	}
	for i := int64(1); i <= 300; i++ {
		if _, err := a.UpdateSandbox(ctx, "default", "rw", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			sb.Meta.Labels["seq"] = strconv.FormatInt(i, 10)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		acked.Store(i)
		if i%10 == 0 {
			// A revision no cached prefix sees: b's next read must learn
			// through a progress notification that it has caught up.
			if _, err := raw.Put(ctx, "/elsewhere/"+strconv.FormatInt(i, 10), "x"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.GetSandbox(ctx, "default", "rw"); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := bCache.Stats()
	if st.Served < 300 || st.Fallbacks != 0 {
		t.Errorf("b's cache served %d reads with %d fallbacks to etcd; want its reads served from the cache", st.Served, st.Fallbacks)
	}
	t.Logf("b's cache: %+v", st)
}

// A client watch served from the cache, while the cache's own watch is cut
// off and etcd compacts past it: on reconnecting the cache lists again
// and hands the watch what changed meanwhile, so its view ends equal to
// etcd's, with no error and no new watch needed.
func TestCacheResumesAfterCompactionWithoutLosingEvents(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	proxy := etcdProxy(t, srv.Endpoint())
	writer := store.New(raw, store.Options{})
	b, bCache, _ := cachedNode(t, "http://"+proxy.Addr())
	for _, n := range []string{"s1", "s2", "s3"} {
		if _, err := writer.CreateSandbox(ctx, sandbox(n)); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := b.WatchSandboxes(wctx, "", "", 0)
	view := map[string]string{} // name → seq label
	var mu sync.Mutex
	viewDone := make(chan error, 1)
	go func() {
		for e := range events {
			if e.Err != nil {
				viewDone <- e.Err
				return
			}
			mu.Lock()
			if e.Type == shoalv1.EventType_DELETED {
				delete(view, e.Object.Meta.Name)
			} else {
				view[e.Object.Meta.Name] = e.Object.Meta.Labels["seq"]
			}
			mu.Unlock()
		}
		viewDone <- nil
	}()
	waitView := func(want map[string]string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, fmt.Sprintf("the client watch's view is %v", want), func() (bool, error) {
			select {
			case err := <-viewDone:
				t.Fatalf("the client watch ended: %v", err)
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			if !maps.Equal(view, want) {
				return false, fmt.Errorf("view %v", view)
			}
			return true, nil
		})
	}
	waitView(map[string]string{"s1": "", "s2": "", "s3": ""})

	proxy.SetDown(true)
	if _, err := writer.CreateSandbox(ctx, sandbox("s4")); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.UpdateSandbox(ctx, "default", "s2", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["seq"] = "2"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, writer.SandboxKey("default", "s3")); err != nil {
		t.Fatal(err)
	}
	compactNow(t, raw)
	proxy.SetDown(false)
	waitView(map[string]string{"s1": "", "s2": "2", "s4": ""})
	if st := bCache.Stats(); st.Relists < 1 {
		t.Errorf("the cache resumed without listing again after the compaction: %+v", st)
	}
	// And a read through b is current.
	if _, err := b.GetSandbox(ctx, "default", "s3"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Errorf("get of the deleted s3 through b: %v, want NOT_FOUND", err)
	}
}

// A hundred client watches on one node cost no etcd watch beyond the
// cache's one per prefix, and each gets every event.
func TestCacheClientWatchesShareOneEtcdWatchPerPrefix(t *testing.T) {
	t.Parallel()
	_, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	b, bCache, _ := cachedNode(t, "http://"+srv.Endpoint())
	wctx, cancel := context.WithCancel(ctx)
	var chans []<-chan store.Event[*shoalv1.Sandbox]
	for range 100 {
		chans = append(chans, b.WatchSandboxes(wctx, "", "", 0))
	}
	if _, err := b.CreateSandbox(ctx, sandbox("w")); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		select {
		case e := <-ch:
			if e.Err != nil || e.Type != shoalv1.EventType_ADDED || e.Object.Meta.Name != "w" {
				t.Fatalf("watch %d: %+v", i, e)
			}
		case <-time.After(time.Minute):
			t.Fatalf("watch %d: no event within a minute", i)
		}
	}
	st := bCache.Stats()
	// One per prefix: sandboxes, providers, and the node registry's live
	// keys and cordons.
	if st.EtcdWatches != 4 || st.ClientWatches != 100 {
		t.Errorf("100 client watches: %d etcd watches opened, %d client watches served; want 4 (one per prefix) and 100", st.EtcdWatches, st.ClientWatches)
	}
	cancel()
	testenv.Eventually(t, time.Minute, "client watches released after their context ended", func() (bool, error) {
		st := bCache.Stats()
		return st.ClientWatches == 0, fmt.Errorf("%+v", st)
	})
}

// A watch that resumes from a revision in the event log replays it; one
// from a revision older than the log is served by etcd.
func TestCacheWatchResumesFromRevision(t *testing.T) {
	t.Parallel()
	_, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	b, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	first, err := b.CreateSandbox(ctx, sandbox("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSandbox(ctx, sandbox("r2")); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{first.Meta.ResourceVersion, 1} {
		wctx, cancel := context.WithCancel(ctx)
		ch := b.WatchSandboxes(wctx, "", "", from)
		var names []string
		for len(names) < 2 && (from == 1 || len(names) < 1) {
			select {
			case e := <-ch:
				if e.Err != nil {
					t.Fatalf("from %d: %v", from, e.Err)
				}
				names = append(names, e.Object.Meta.Name)
			case <-time.After(time.Minute):
				t.Fatalf("from %d: got %v, no more events", from, names)
			}
		}
		cancel()
		want := []string{"r2"}
		if from == 1 {
			want = []string{"r1", "r2"}
		}
		if fmt.Sprint(names) != fmt.Sprint(want) {
			t.Errorf("watch from %d: %v, want %v", from, names, want)
		}
	}
}

// The pages of a list are one snapshot, also when served from the cache
// while the records change between pages.
func TestCachePagedListIsOneSnapshot(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	b, bCache, _ := cachedNode(t, "http://"+srv.Endpoint())
	var want []string
	for i := range 10 {
		n := fmt.Sprintf("p%02d", i)
		want = append(want, n)
		if _, err := b.CreateSandbox(ctx, sandbox(n)); err != nil {
			t.Fatal(err)
		}
	}
	page, err := b.ListSandboxes(ctx, "", store.ListOptions{Limit: 4}, nil)
	if err != nil || page.Next == nil {
		t.Fatalf("first page: %v, next %v", err, page.Next)
	}
	got := names(page.Items)
	rev := page.Revision
	if _, err := raw.Delete(ctx, b.SandboxKey("default", "p09")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSandbox(ctx, sandbox("p10")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetSandbox(ctx, "default", "p10"); err != nil {
		t.Fatal(err) // the cache has the changes now
	}
	for page.Next != nil {
		if page, err = b.ListSandboxes(ctx, "", *page.Next, nil); err != nil {
			t.Fatal(err)
		}
		if page.Revision != rev {
			t.Errorf("a later page at revision %d, the first at %d", page.Revision, rev)
		}
		got = append(got, names(page.Items)...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("paged list: %v, want the first page's snapshot %v", got, want)
	}
	if st := bCache.Stats(); st.Fallbacks != 0 || st.Snapshots != 0 {
		t.Errorf("pages read from etcd, or the finished list's snapshot kept: %+v", st)
	}
	// Two lists at one revision share its snapshot: the first to finish
	// leaves it to the other, the second drops it.
	first, err := b.ListSandboxes(ctx, "", store.ListOptions{Limit: 8}, nil)
	if err != nil || first.Next == nil {
		t.Fatalf("first list: %v, next %v", err, first.Next)
	}
	second, err := b.ListSandboxes(ctx, "", store.ListOptions{Limit: 8}, nil)
	if err != nil || second.Next == nil || second.Revision != first.Revision {
		t.Fatalf("second list: %v, next %v, revision %d (first %d)", err, second.Next, second.Revision, first.Revision)
	}
	for i, p := range []*store.Page[*shoalv1.Sandbox]{&first, &second} {
		if st := bCache.Stats(); st.Snapshots != 1 {
			t.Fatalf("before list %d's last page: %d snapshots, want 1", i, st.Snapshots)
		}
		if *p, err = b.ListSandboxes(ctx, "", *p.Next, nil); err != nil || p.Next != nil {
			t.Fatalf("list %d's last page: %v, next %v", i, err, p.Next)
		}
	}
	if st := bCache.Stats(); st.Snapshots != 0 || st.Fallbacks != 0 {
		t.Errorf("after both lists: %+v, want no snapshot and no page from etcd", st)
	}
	// A selector over the cache.
	page, err = b.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool { return sb.Meta.Name == "p10" })
	if err != nil || fmt.Sprint(names(page.Items)) != "[p10]" {
		t.Errorf("list with a selector: %v %v", names(page.Items), err)
	}
}

func names(sbs []*shoalv1.Sandbox) []string {
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.Meta.Name)
	}
	return out
}

// The update loop starting from a stale cached copy loses no write: a
// change made elsewhere survives, and an update the stale copy makes look
// like a no-op is still written.
func TestCacheStaleStartLosesNoUpdate(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	writer := store.New(raw, store.Options{})
	b, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	if _, err := writer.CreateSandbox(ctx, sandbox("st")); err != nil {
		t.Fatal(err)
	}
	stale, err := writer.UpdateSandbox(ctx, "default", "st", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["color"] = "blue"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.UpdateSandbox(ctx, "default", "st", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["color"] = "red"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetSandbox(ctx, "default", "st"); err != nil {
		t.Fatal(err) // b's copy has red now; put blue back as if it lagged
	}
	if err := b.InjectStaleForTest(stale, stale.Meta.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	// "blue" is what the stale copy has: from it, a no-op.
	got, err := b.UpdateSandbox(ctx, "default", "st", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["color"] = "blue"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := writer.GetSandbox(ctx, "default", "st")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Meta.Labels["color"] != "blue" || got.Meta.ResourceVersion != cur.Meta.ResourceVersion {
		t.Errorf("update to blue from a stale blue copy: stored %v at %d, returned %d; want it written",
			cur.Meta.Labels, cur.Meta.ResourceVersion, got.Meta.ResourceVersion)
	}
	// A change elsewhere, then an update from the stale copy.
	if _, err := writer.UpdateSandbox(ctx, "default", "st", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["owner"] = "a"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.InjectStaleForTest(stale, stale.Meta.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateSandbox(ctx, "default", "st", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["size"] = "l"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cur, err = writer.GetSandbox(ctx, "default", "st"); err != nil {
		t.Fatal(err)
	}
	if cur.Meta.Labels["owner"] != "a" || cur.Meta.Labels["size"] != "l" {
		t.Errorf("labels after an update from a stale copy: %v; want owner=a (written elsewhere) and size=l", cur.Meta.Labels)
	}
	// A precondition the stale copy fails but etcd's state meets.
	if err := b.InjectStaleForTest(stale, stale.Meta.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateSandbox(ctx, "default", "st", store.Preconditions{ResourceVersion: cur.Meta.ResourceVersion}, func(sb *shoalv1.Sandbox) error {
		sb.Meta.Labels["pre"] = "ok"
		return nil
	}); err != nil {
		t.Errorf("update with a precondition etcd's state meets, from a stale copy: %v", err)
	}
}

// Corrupt records read through the cache as from etcd: a get names the
// key (DATA_LOSS), a list skips it with a warning.
func TestCacheCorruptRecords(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	b, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	if _, err := raw.Put(ctx, b.SandboxKey("default", "bad"), "\xff\xff not protobuf"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSandbox(ctx, sandbox("good")); err != nil {
		t.Fatal(err)
	}
	_, err := b.GetSandbox(ctx, "default", "bad")
	mustKind(t, err, shoal.KindDataLoss)
	page, err := b.ListSandboxes(ctx, "", store.ListOptions{}, nil)
	if err != nil || fmt.Sprint(names(page.Items)) != "[good]" || len(page.Warnings) != 1 {
		t.Errorf("list with a corrupt record: %v, warnings %v, err %v", names(page.Items), page.Warnings, err)
	}
}

// One revision that changes several keys (one Txn) reaches the copy and
// the client watches whole.
func TestCacheRevisionOfSeveralKeys(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	writer := store.New(raw, store.Options{})
	b, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	for _, n := range []string{"x", "y"} {
		if _, err := writer.CreateSandbox(ctx, sandbox(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.GetSandbox(ctx, "default", "y"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := b.WatchSandboxes(wctx, "", "", 0)
	for range 2 {
		<-events // the current state: x and y
	}
	if _, err := raw.Txn(ctx).Then(clientv3.OpDelete(b.SandboxKey("default", "x")), clientv3.OpDelete(b.SandboxKey("default", "y"))).Commit(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y"} {
		if _, err := b.GetSandbox(ctx, "default", n); shoal.KindOf(err) != shoal.KindNotFound {
			t.Errorf("get %s after a Txn deleted x and y: %v, want NOT_FOUND", n, err)
		}
	}
	var got []string
	for len(got) < 2 {
		select {
		case e := <-events:
			got = append(got, e.Type.String()+" "+e.Object.Meta.Name)
		case <-time.After(time.Minute):
			t.Fatalf("client watch after a Txn deleted x and y: %v", got)
		}
	}
	if fmt.Sprint(got) != "[DELETED x DELETED y]" {
		t.Errorf("client watch: %v, want both deletions", got)
	}
}

// A relist after a compaction tells the client watches of a record deleted
// and made again (DELETED of the old uid, then ADDED) and of a corrupt
// record deleted (DELETED of its name).
func TestCacheRelistReportsReplacementsAndCorruptDeletes(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	proxy := etcdProxy(t, srv.Endpoint())
	writer := store.New(raw, store.Options{})
	old, err := writer.CreateSandbox(ctx, sandbox("r"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, writer.SandboxKey("default", "bad"), "\xff not protobuf"); err != nil {
		t.Fatal(err)
	}
	b, bCache, _ := cachedNode(t, "http://"+proxy.Addr())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := b.WatchSandboxes(wctx, "", "", 0)
	if e := <-events; e.Object.Meta.Name != "r" {
		t.Fatalf("current state: %+v", e)
	}
	proxy.SetDown(true)
	if _, err := raw.Delete(ctx, writer.SandboxKey("default", "r")); err != nil {
		t.Fatal(err)
	}
	again, err := writer.CreateSandbox(ctx, sandbox("r"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, writer.SandboxKey("default", "bad")); err != nil {
		t.Fatal(err)
	}
	compactNow(t, raw)
	proxy.SetDown(false)
	var got []string
	for len(got) < 3 {
		select {
		case e := <-events:
			if e.Err != nil {
				t.Fatalf("client watch ended: %v (after %v)", e.Err, got)
			}
			got = append(got, fmt.Sprintf("%s %s %s", e.Type, e.Object.Meta.Name, e.Object.Meta.Uid))
		case <-time.After(time.Minute):
			t.Fatalf("client watch after the relist: %v", got)
		}
	}
	want := []string{"DELETED bad ", "DELETED r " + old.Meta.Uid, "ADDED r " + again.Meta.Uid}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("client watch after the relist:\n got %q\nwant %q", got, want)
	}
	if st := bCache.Stats(); st.Relists < 1 {
		t.Errorf("no relist: %+v", st)
	}
}

// etcdProxy is a TCP proxy in front of etcd, to cut a cache off from it.
func etcdProxy(t *testing.T, endpoint string) *tcpproxy.Proxy {
	t.Helper()
	proxy, err := tcpproxy.Start(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy
}

// compactNow compacts etcd's history up to its current revision.
func compactNow(t *testing.T, raw *clientv3.Client) {
	t.Helper()
	ctx := ctxT(t)
	resp, err := raw.Get(ctx, "compact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// A node's watch (the agent's) gets the events of that node's sandboxes
// only, from the cache and from etcd alike: the current state, live
// changes and a replay from a past revision.
func TestNodeWatchSeesOnlyItsSandboxes(t *testing.T) {
	t.Parallel()
	_, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	cached, _, c := cachedNode(t, "http://"+srv.Endpoint())
	plain := store.New(c, store.Options{})
	register(t, plain, c, "n1", 0, nil)
	register(t, plain, c, "n2", 0, nil)
	x, err := cached.CreateSandboxOn(ctx, sandbox("x"), store.Placement{Node: "n1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cached.CreateSandboxOn(ctx, sandbox("y"), store.Placement{Node: "n2"}, ""); err != nil {
		t.Fatal(err)
	}
	next := func(what string, ch <-chan store.Event[*shoalv1.Sandbox]) store.Event[*shoalv1.Sandbox] {
		t.Helper()
		select {
		case e := <-ch:
			if e.Err != nil {
				t.Fatalf("%s: %v", what, e.Err)
			}
			return e
		case <-time.After(time.Minute):
			t.Fatalf("%s: no event within a minute", what)
		}
		return store.Event[*shoalv1.Sandbox]{}
	}
	touch := func(name string, round int) {
		t.Helper()
		if _, err := cached.UpdateSandbox(ctx, "default", name, store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			sb.Status.Message = fmt.Sprintf("round %d", round)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for round, st := range []*store.Store{cached, plain} {
		what := []string{"cached", "etcd"}[round]
		wctx, cancel := context.WithCancel(ctx)
		live := st.WatchNodeSandboxes(wctx, "n1", 0)
		if e := next(what+": current state", live); e.Type != shoalv1.EventType_ADDED || e.Object.Meta.Name != "x" {
			t.Fatalf("%s: first event %v %s, want ADDED x", what, e.Type, e.Object.Meta.Name)
		}
		// y's change comes first in etcd; the watch of n1 must skip it.
		touch("y", round)
		touch("x", round)
		if e := next(what+": live", live); e.Type != shoalv1.EventType_MODIFIED || e.Object.Meta.Name != "x" {
			t.Fatalf("%s: live event %v %s, want MODIFIED x", what, e.Type, e.Object.Meta.Name)
		}
		replay := st.WatchNodeSandboxes(wctx, "n1", x.Meta.ResourceVersion)
		for r := 0; r <= round; r++ { // x's changes since its create, y's skipped
			if e := next(what+": replay", replay); e.Object.Meta.Name != "x" || e.Object.Status.Message != fmt.Sprintf("round %d", r) {
				t.Fatalf("%s: replayed %s %q, want x's round %d", what, e.Object.Meta.Name, e.Object.Status.Message, r)
			}
		}
		cancel()
	}
}
