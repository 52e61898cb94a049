package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/backoff"
	"shoal/internal/chaosbreak"
	"shoal/placement"
)

// The watch cache. A node keeps a copy of every sandbox and provider in
// memory, fed by one etcd watch per prefix, in the spirit of the
// Kubernetes apiserver's watch cache with consistent reads from cache:
//
//   - each kind is listed once at a revision, then watched from the next
//     one; a watch that breaks resumes from the last revision applied, and
//     only a compacted one lists again (the difference between the old
//     copy and the new list goes to the client watches as events, so they
//     lose no change: see cachewatch.go);
//   - a read first asks etcd for its current revision (one linearizable
//     count-only range request on a tiny key) and waits until the copy has
//     applied that revision, asking etcd for a progress notification when
//     the revision was made outside the prefix: so a read never returns
//     older state than a write that finished before it began. A copy that
//     cannot catch up within cacheWaitLimit, or that is not listed yet,
//     sends the read to etcd as before;
//   - the update loop starts from the cached copy (or from this node's own
//     last write of the key, if newer), so an uncontended update is one
//     Txn; the Txn's compare makes a stale start cost a retry, never a
//     wrong write, and the loop never refuses or skips a write on cached
//     state alone (update.go);
//   - client watches are served from the cache's event log, so N of them
//     cost no etcd watch at all (cachewatch.go);
//   - a paged list reads a copy-on-write clone of the copy taken at its
//     first page, so its pages are one snapshot as with etcd.

// CacheOptions tune a Cache. The zero value takes the defaults.
type CacheOptions struct {
	// Events is how many recent events each kind keeps for client watches
	// that start from a past revision (default 10,000); older revisions
	// are watched from etcd directly.
	Events int
	// Logger receives the cache's few lines (lists, resumes, fallbacks).
	Logger *slog.Logger
}

// Cache is a node's watch-fed copy of sandboxes and providers, and of the
// node registry for placement (keycache.go). Store.UseCache
// attaches it; its Start runs the watches. Until the first list is in,
// every read goes to etcd.
type Cache struct {
	s   *Store
	log *slog.Logger

	sandboxes *kindCache[*shoalv1.Sandbox]
	providers *kindCache[*shoalv1.Provider]
	// The node registry's live keys and cordons, for placement
	// (keycache.go).
	liveNodes, cordons *keyCache

	ready chan struct{}

	// Counters, for tests and the benchmarks.
	served    atomic.Int64 // reads served from the copy
	fallbacks atomic.Int64 // reads sent to etcd because the copy lagged
	relists   atomic.Int64 // lists after the first (compaction)
	watches   atomic.Int64 // etcd watches opened
	// seen is the newest etcd revision a read asked the copy to reach.
	seen atomic.Int64
}

// cacheWaitLimit bounds how long a read waits for the copy to catch up
// before it goes to etcd.
const cacheWaitLimit = 3 * time.Second

// snapshotTTL is how long a paged list's snapshot is kept for its
// continuations; maxSnapshots bounds how many are kept at once. A
// continuation whose snapshot is gone reads etcd at its revision.
const (
	snapshotTTL  = time.Minute
	maxSnapshots = 16
)

// UseCache makes a Cache for s and attaches it: from then on s serves Get,
// List and Watch of sandboxes and providers from it, once its Start has
// listed them. Call it before the store is shared.
func (s *Store) UseCache(o CacheOptions) *Cache {
	if o.Events <= 0 {
		o.Events = 10000
	}
	if o.Logger == nil {
		o.Logger = s.log
	}
	c := &Cache{s: s, log: o.Logger.With("subsystem", "watch-cache"), ready: make(chan struct{})}
	c.sandboxes = newKindCache(c, sandboxCodec, s.k.allSandboxes(), o.Events)
	c.sandboxes.node = NodeOf
	c.providers = newKindCache(c, providerCodec, s.k.allProviders(), o.Events)
	c.liveNodes = newKeyCache(c, s.k.node(""))
	c.cordons = newKeyCache(c, s.k.cordon(""))
	s.cache = c
	return c
}

// Start lists and watches both kinds, and the node registry's live keys
// and cordons, until ctx ends. It returns nil when
// ctx ends; a watch that fails is resumed, so it returns no other error.
func (c *Cache) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, k := range []interface {
		run(context.Context)
		requestProgress(context.Context)
		stopWatchers()
	}{c.sandboxes, c.providers} {
		wg.Go(func() { k.run(ctx); k.stopWatchers() })
		wg.Go(func() { k.requestProgress(ctx) })
	}
	for _, k := range []*keyCache{c.liveNodes, c.cordons} {
		wg.Go(func() { k.run(ctx) })
	}
	wg.Go(func() {
		for _, l := range []chan struct{}{c.sandboxes.established, c.providers.established, c.liveNodes.listed, c.cordons.listed} {
			select {
			case <-l:
			case <-ctx.Done():
				return
			}
		}
		close(c.ready)
	})
	wg.Wait()
	return nil
}

// Ready is closed once both kinds are listed and watched, and the node
// registry's copies listed.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// CacheStats are the cache's counters.
type CacheStats struct {
	// Served: reads (gets, lists, watches from now) served from the copy.
	Served int64
	// Fallbacks: reads sent to etcd because the copy lagged too long.
	Fallbacks int64
	// Relists: lists after the first (a compacted resume).
	Relists int64
	// EtcdWatches: etcd watches the cache opened (one per prefix: the two
	// kinds and the registry's live keys and cordons; plus one per resume).
	EtcdWatches int64
	// Sandboxes and Providers held now.
	Sandboxes, Providers int
	// ClientWatches served from the cache now.
	ClientWatches int
	// Snapshots kept for paged lists not finished yet.
	Snapshots int
}

// Stats reads the counters.
func (c *Cache) Stats() CacheStats {
	st := CacheStats{Served: c.served.Load(), Fallbacks: c.fallbacks.Load(), Relists: c.relists.Load(), EtcdWatches: c.watches.Load()}
	st.Sandboxes, st.ClientWatches = c.sandboxes.counts()
	var w int
	st.Providers, w = c.providers.counts()
	st.ClientWatches += w
	st.Snapshots = c.sandboxes.snapshots() + c.providers.snapshots()
	return st
}

// streamCtx puts the kind's watch on a gRPC stream of its own: etcd
// answers a progress request for the stream it comes on (the client groups
// watches into streams by their context's metadata), and only once every
// watch on that stream has caught up and reached its start revision, so a
// watch of another kind, or of anyone else, must not share it.
func (k *kindCache[T]) streamCtx(ctx context.Context) context.Context {
	return clientv3.WithRequireLeader(metadata.NewOutgoingContext(ctx, metadata.Pairs("shoal-watch-cache", k.prefix)))
}

// requestProgress sends the progress requests waitFresh asks for, one at a
// time, until ctx ends.
func (k *kindCache[T]) requestProgress(ctx context.Context) {
	wctx := k.streamCtx(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.progress:
		}
		rctx, cancel := context.WithTimeout(wctx, 2*time.Second)
		if err := k.c.s.c.RequestProgress(rctx); err != nil && ctx.Err() == nil {
			k.c.log.Debug("progress request failed", "prefix", k.prefix, "err", err)
		}
		cancel()
	}
}

// askProgress asks for a progress notification (coalesced: one pending
// request at a time).
func (k *kindCache[T]) askProgress() {
	select {
	case k.progress <- struct{}{}:
	default:
	}
}

// currentRevision is etcd's revision now, read linearizably: the cheapest
// request that goes through etcd's read index.
// Its round trip is etcd's latency as this node sees it
// (shoal_etcd_round_trip_seconds).
func (c *Cache) currentRevision(ctx context.Context) (int64, error) {
	t0 := time.Now()
	resp, err := c.s.c.Get(ctx, c.s.k.clusterID(), clientv3.WithCountOnly())
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	c.s.metrics.EtcdRoundTrip(time.Since(t0))
	return resp.Header.Revision, nil
}

// entry is one cached record. A record that does not decode is kept with
// its error, so a Get names it (DATA_LOSS) and a list warns of it, as
// when read from etcd.
//
// The B-tree holds the key and a pointer: its nodes keep spare room for
// items, which should be small.
type entry[T object] struct {
	key string
	*record
}

// record is a cached record's value; nil in an entry made to look a key up.
type record struct {
	raw []byte // decoded again on a read (cacheindex.go)
	rev int64
	err error
	ix  index // unset if err is
	// derived is an encoding made of this version of the record
	// (Record.Derived, records.go): it goes with the record.
	derived atomic.Pointer[derived]
}

func entryLess[T object](a, b entry[T]) bool { return a.key < b.key }

// kindCache is the copy of one kind (one prefix).
type kindCache[T object] struct {
	c      *Cache
	codec  codec[T]
	prefix string
	max    int // events kept

	listed     chan struct{} // closed after the first list
	listedOnce sync.Once
	// watching is true while the watch is established: a read waits for
	// the copy only then (relisting or resuming, it reads etcd at once).
	watching atomic.Bool
	// established is closed when the first watch is.
	established     chan struct{}
	establishedOnce sync.Once
	progress        chan struct{} // waitFresh's requests for a progress notification

	mu   sync.RWMutex
	tree *btree.BTreeG[entry[T]]
	// rev: every change with revision <= rev is applied.
	rev int64
	// changed is closed (and replaced) whenever rev advances.
	changed chan struct{}
	// events: every change with revision > evStart, oldest first, as
	// bytes (logged).
	events  []logged
	evStart int64
	// watchers are the client watches served from the log; closed is set
	// when the cache stops (no more are served).
	watchers map[*cacheWatcher[T]]struct{}
	closed   bool
	// snaps are paged lists' snapshots by revision.
	snaps map[int64]snapshotOf[T]
	// recent: this node's own latest writes not yet seen on the watch,
	// a better start for the update loop than a lagging copy.
	recent map[string]ownWrite
	// unseenAt: the created records in recent that the copy does not
	// hold yet, and their nodes; tally counts them per node as recent
	// and the copy change, so that placement need not walk recent.
	unseenAt map[string]string
	// node, if set, names the node a record belongs to; tally then counts
	// the records per node for placement (the copy's, this node's own
	// creates the copy has not seen yet, and its creates in flight), so
	// placement reads no slot key per sandbox. Calls to tally are made
	// under mu.
	node  func(T) string
	tally placement.Tally
	// uids indexes the copy's records that decode by their uid (uid →
	// key), for the APIs that name a sandbox by its uid (uidindex.go).
	// It changes with tree, under mu.
	uids map[string]string
}

// logged is one event of the log as it is kept: the record's bytes, not
// its decoded object. A client watch that replays the log decodes them
// again (the live fan-out gets the decoded event at once), so a version
// that later changes costs the log its bytes (shared with the copy until
// then), not a decoded object: in a fleet whose agents write statuses, the
// log is mostly such versions.
type logged struct {
	typ shoalv1.EventType
	key string
	rev int64
	// raw is the record's bytes at rev (for DELETED, its last bytes);
	// nil for the deletion of a record that did not decode.
	raw []byte
}

// event decodes a logged event.
func (k *kindCache[T]) event(l logged) (Event[T], error) {
	e := Event[T]{Type: l.typ, Revision: l.rev, key: l.key}
	if l.raw == nil {
		e.Object = k.codec.stub(l.key, l.rev)
		return e, nil
	}
	// For DELETED too the object carries the deletion's revision.
	var err error
	e.Object, err = k.codec.decode(&mvccpb.KeyValue{Key: []byte(l.key), Value: l.raw, ModRevision: l.rev})
	return e, err
}

type snapshotOf[T object] struct {
	tree *btree.BTreeG[entry[T]]
	at   time.Time
	// lists are the paged lists reading it that have not had their last
	// page: the last one to finish drops it (a clone shares the copy's
	// B-tree nodes until the copy changes, then holds its own, so a kept
	// snapshot costs up to a copy of the tree and pins the records it
	// holds). One never finished goes after snapshotTTL.
	lists int
}

// ownWrite is this node's own write of a key: the bytes it wrote (decoded
// only when an update loop starts from them), their revision, and the
// node of the record; absent marks a deleted key.
type ownWrite struct {
	raw    []byte
	rev    int64
	node   string
	absent bool
}

func newKindCache[T object](c *Cache, cd codec[T], prefix string, max int) *kindCache[T] {
	return &kindCache[T]{c: c, codec: cd, prefix: prefix, max: max, listed: make(chan struct{}), established: make(chan struct{}), progress: make(chan struct{}, 1),
		tree: btree.NewG(32, entryLess[T]), changed: make(chan struct{}),
		watchers: map[*cacheWatcher[T]]struct{}{}, snaps: map[int64]snapshotOf[T]{}, recent: map[string]ownWrite{},
		unseenAt: map[string]string{}, uids: map[string]string{}}
}

// pick chooses among nodes by the tally (placement.Tally.Pick: fewest
// sandboxes, counting the copy's records, this node's creates the copy has
// not seen yet and its creates in flight), and counts the choice as in
// flight until release is called (once; more calls do nothing). The choice
// and its count are one step under mu, so concurrent creates see each
// other.
func (k *kindCache[T]) pick(nodes []*shoalv1.Node) (chosen *shoalv1.Node, release func()) {
	k.mu.Lock()
	chosen = k.tally.Pick(nodes)
	k.mu.Unlock()
	return chosen, k.tally.Releaser(chosen.Name, &k.mu)
}

// count adds d to the per-node count of e's node (k.mu held).
func (k *kindCache[T]) count(e entry[T], d int) {
	if k.node == nil || e.err != nil {
		return
	}
	k.tally.Count(e.ix.owner(), d)
}

// nodeCounts are the records per node, and whether the copy is listed.
func (k *kindCache[T]) nodeCounts() (map[string]int, bool) {
	if !k.isListed() {
		return nil, false
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.tally.Counts(), true
}

func (k *kindCache[T]) counts() (objects, watchers int) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.tree.Len(), len(k.watchers)
}

// isListed reports whether the first list is in.
func (k *kindCache[T]) isListed() bool {
	select {
	case <-k.listed:
		return true
	default:
		return false
	}
}

// run lists, then watches from the list's revision, resuming from the last
// applied revision after a broken watch and listing again only after a
// compaction, until ctx ends.
func (k *kindCache[T]) run(ctx context.Context) {
	follow(ctx, k.c, k.prefix, k.relist, k.watch)
}

// follow is the loop of every copy of a prefix: list, then watch; a watch
// that breaks is resumed (watch starts from what the copy has applied), one
// that etcd compacted away lists again. Failures back off; a watch that
// delivered anything resets the backoff. It returns when ctx ends.
func follow(ctx context.Context, c *Cache, prefix string, list func(context.Context) error,
	watch func(context.Context) (compacted, delivered bool, err error)) {
	needList := true
	fails := 0
	for ctx.Err() == nil {
		if needList {
			if err := list(ctx); err != nil {
				if ctx.Err() == nil {
					c.log.Warn("list failed; retrying", "prefix", prefix, "err", err)
				}
				fails++
				if backoff.Sleep(ctx, retryDelay(fails)) != nil {
					return
				}
				continue
			}
			needList, fails = false, 0
		}
		compacted, delivered, err := watch(ctx)
		if delivered {
			fails = 0
		}
		switch {
		case ctx.Err() != nil:
			return
		case compacted:
			c.log.Info("watch resume was compacted away; listing again", "prefix", prefix)
			needList = true
		case err != nil:
			fails++
			c.log.Info("watch broke; resuming", "prefix", prefix, "err", err)
			if backoff.Sleep(ctx, retryDelay(fails)) != nil {
				return
			}
		}
	}
}

func retryDelay(fails int) time.Duration {
	return min(50*time.Millisecond<<min(fails, 6), 2*time.Second)
}

func (k *kindCache[T]) appliedRev() int64 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.rev
}

// relist reads the whole prefix at one revision (in pages) and replaces
// the copy. After the first list, what differs between the old copy and
// the new one goes to the client watches as events at the list's
// revision, and the event log starts again there.
func (k *kindCache[T]) relist(ctx context.Context) error {
	tree := btree.NewG(32, entryLess[T])
	end := clientv3.GetPrefixRangeEnd(k.prefix)
	from, rev := k.prefix, int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listBatch)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := k.c.s.c.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			e, _ := newEntry(k.codec, kv)
			if e.err != nil {
				k.c.s.report(e.key, kv.ModRevision, e.err)
			}
			tree.ReplaceOrInsert(e)
		}
		if !resp.More {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	first := !k.isListed()
	if !first {
		k.c.relists.Add(1)
		k.diffLocked(k.tree, tree, rev)
	}
	k.tree, k.rev, k.evStart, k.events = tree, rev, rev, nil
	k.tally.ResetCounts()
	clear(k.uids)
	tree.Ascend(func(e entry[T]) bool { k.count(e, 1); k.indexUID(e, 1); return true })
	clear(k.snaps)
	k.clearRecentLocked()
	k.advanceLocked()
	k.listedOnce.Do(func() { close(k.listed) })
	k.c.log.Info("listed", "prefix", k.prefix, "objects", tree.Len(), "revision", rev, "first", first)
	return nil
}

// diffLocked sends the client watches what changed between two copies,
// as events at revision rev.
func (k *kindCache[T]) diffLocked(old, cur *btree.BTreeG[entry[T]], rev int64) {
	var evs []Event[T]
	gone := func(o entry[T]) {
		var obj T
		if o.err == nil {
			obj = o.object(k.codec, rev)
		} else {
			obj = k.codec.stub(o.key, rev) // a corrupt record's name is free again
		}
		obj.GetMeta().ResourceVersion = rev
		evs = append(evs, Event[T]{Type: shoalv1.EventType_DELETED, Object: obj, Revision: rev, key: o.key})
	}
	old.Ascend(func(o entry[T]) bool {
		if _, ok := cur.Get(o); !ok {
			gone(o)
		}
		return true
	})
	cur.Ascend(func(n entry[T]) bool {
		if n.err != nil {
			return true
		}
		o, ok := old.Get(n)
		switch {
		case ok && o.err == nil && o.ix.uid != n.ix.uid:
			// Deleted and made again while the watch was away: the old
			// one's watchers must hear that it is gone.
			gone(o)
			evs = append(evs, Event[T]{Type: shoalv1.EventType_ADDED, Object: n.object(k.codec, n.rev), Revision: rev, key: n.key})
		case !ok || o.err != nil:
			evs = append(evs, Event[T]{Type: shoalv1.EventType_ADDED, Object: n.object(k.codec, n.rev), Revision: rev, key: n.key})
		case o.rev != n.rev:
			evs = append(evs, Event[T]{Type: shoalv1.EventType_MODIFIED, Object: n.object(k.codec, n.rev), Revision: rev, key: n.key})
		}
		return true
	})
	for _, e := range evs {
		k.fanOutLocked(e)
	}
}

// watch follows the prefix from the applied revision until the watch
// breaks or ctx ends; compacted reports a resume that etcd compacted away.
// delivered reports whether etcd answered anything on it (the watch
// worked, so a later break starts the backoff again from its start).
func (k *kindCache[T]) watch(ctx context.Context) (compacted, delivered bool, err error) {
	wctx, cancel := context.WithCancel(k.streamCtx(ctx))
	defer cancel()
	from := k.appliedRev() + 1
	k.c.watches.Add(1)
	wch := k.c.s.c.Watch(wctx, k.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	defer k.watching.Store(false)
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0, delivered, err
		}
		delivered = true
		switch {
		case wr.Created:
			// Reads may wait on it from now: it is registered, and
			// progress requests on its stream can be answered.
			k.watching.Store(true)
			k.establishedOnce.Do(func() { close(k.established) })
		case wr.IsProgressNotify():
			k.progressed(wr.Header.Revision)
		case len(wr.Events) > 0:
			k.apply(wr.Events)
		}
	}
	if ctx.Err() != nil {
		return false, delivered, nil
	}
	return false, delivered, errors.New("watch channel closed")
}

// progressed: etcd says the watch has seen everything through rev.
func (k *kindCache[T]) progressed(rev int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rev > k.rev {
		k.rev = rev
		k.advanceLocked()
	}
}

// apply applies one watch response's events. Only the events' own
// revisions advance rev: a response's header revision may run ahead of
// events still to come while the watch catches up.
func (k *kindCache[T]) apply(evs []*clientv3.Event) {
	if chaosbreak.Is("stale-cache") {
		// The self-test of the linearizability checker: a copy that lags
		// behind etcd, served as if it were current (see waitFresh).
		time.Sleep(200 * time.Millisecond)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// One revision may change several keys (one Txn, a prefix delete):
	// what was applied before this response is the bar, not the revision
	// of the event just applied.
	base := k.rev
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		rev := ev.Kv.ModRevision
		if rev <= base {
			continue // already applied (a resume overlaps by design)
		}
		e := Event[T]{Revision: rev, key: key}
		var raw []byte // what the log keeps
		old, had := k.tree.Get(entry[T]{key: key})
		if had {
			k.count(old, -1)
			k.indexUID(old, -1)
		}
		if ev.Type == clientv3.EventTypeDelete {
			k.tree.Delete(entry[T]{key: key})
			if !had {
				k.rev = rev
				continue
			}
			e.Type = shoalv1.EventType_DELETED
			if old.err == nil {
				e.Object, raw = old.object(k.codec, rev), old.raw
			} else {
				// A corrupt record was deleted: its watchers still learn
				// that the name is free.
				e.Object = k.codec.stub(key, rev)
			}
			e.Object.GetMeta().ResourceVersion = rev
		} else {
			n, obj := newEntry(k.codec, ev.Kv)
			if n.err != nil {
				k.c.s.report(key, rev, n.err)
			}
			k.tree.ReplaceOrInsert(n)
			k.count(n, 1)
			k.indexUID(n, 1)
			k.markUnseenLocked(key)
			if n.err != nil {
				k.rev = rev
				continue // skipped by watchers, as from etcd
			}
			e.Type, e.Object, raw = shoalv1.EventType_MODIFIED, obj, n.raw
			if !had || ev.IsCreate() {
				e.Type = shoalv1.EventType_ADDED
			}
		}
		if r, ok := k.recent[key]; ok && r.rev <= rev {
			delete(k.recent, key)
		}
		k.markUnseenLocked(key)
		k.rev = rev
		k.logLocked(logged{typ: e.Type, key: key, rev: rev, raw: raw})
		k.fanOutLocked(e)
	}
	k.advanceLocked()
}

// logLocked appends to the event log, dropping the older half when full.
func (k *kindCache[T]) logLocked(l logged) {
	k.events = append(k.events, l)
	if len(k.events) <= k.max {
		return
	}
	drop := len(k.events) / 2
	k.evStart = k.events[drop-1].rev
	// Events of one revision stay together: drop up to a revision's end.
	for drop < len(k.events) && k.events[drop].rev == k.evStart {
		drop++
	}
	k.events = append([]logged(nil), k.events[drop:]...)
}

func (k *kindCache[T]) advanceLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// waitFresh waits until the copy has applied etcd's current revision, and
// reports false if it may not serve the read: not listed yet, or not
// caught up within cacheWaitLimit (the caller then reads etcd).
func (k *kindCache[T]) waitFresh(ctx context.Context) (bool, error) {
	if !k.isListed() {
		return false, nil
	}
	want, err := k.c.currentRevision(ctx)
	if err == nil {
		for {
			old := k.c.seen.Load()
			if want <= old || k.c.seen.CompareAndSwap(old, want) {
				break
			}
		}
	}
	if err != nil {
		return false, err
	}
	if chaosbreak.Is("stale-cache") {
		k.c.served.Add(1)
		return true, nil
	}
	// Wait at most half of what the caller has left: etcd then still has
	// time to answer.
	limit := cacheWaitLimit
	if d, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(d)/2)
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	// Give the watch a moment to bring the events of a write in the
	// prefix; a revision made elsewhere needs a progress notification,
	// and one notification answers one request: ask again while waiting.
	ask := time.NewTimer(2 * time.Millisecond)
	defer ask.Stop()
	for {
		k.mu.RLock()
		rev, changed := k.rev, k.changed
		k.mu.RUnlock()
		if rev >= want {
			k.c.served.Add(1)
			return true, nil
		}
		if !k.watching.Load() {
			return false, nil // relisting or resuming: nothing to wait for yet
		}
		select {
		case <-ctx.Done():
			return false, ctxErr(ctx)
		case <-changed:
		case <-ask.C:
			k.askProgress()
			ask.Reset(20 * time.Millisecond)
		case <-deadline.C:
			k.c.fallbacks.Add(1)
			k.c.log.Warn("the cache did not catch up in time; reading etcd", "prefix", k.prefix, "applied", rev, "want", want)
			return false, nil
		}
	}
}

// liveRev is the ModRevision of a cached record that decodes and is not
// being deleted, without waiting for the copy to catch up: for a Txn that
// compares it (attachable). ok is false while the watch is not running.
func (k *kindCache[T]) liveRev(key string) (int64, bool) {
	if !k.isListed() || !k.watching.Load() {
		return 0, false
	}
	e, ok := k.get(key)
	if !ok || e.err != nil || e.ix.deleted != nil {
		return 0, false
	}
	return e.rev, true
}

// get is one cached record, fresh as of the call.
func (k *kindCache[T]) get(key string) (entry[T], bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e, ok := k.tree.Get(entry[T]{key: key})
	return e, ok
}

// getAt is get and the revision of the copy it was read from: every
// change after that revision is one a watch from it delivers.
func (k *kindCache[T]) getAt(key string) (entry[T], bool, int64) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e, ok := k.tree.Get(entry[T]{key: key})
	return e, ok, k.rev
}

// snapshot is a copy-on-write clone of the copy and its revision.
func (k *kindCache[T]) snapshot() (*btree.BTreeG[entry[T]], int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tree.Clone(), k.rev
}

// keep stores a paged list's snapshot for its continuations (another list
// at the same revision shares it).
func (k *kindCache[T]) keep(rev int64, t *btree.BTreeG[entry[T]]) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if s, ok := k.snaps[rev]; ok {
		s.lists++
		s.at = now
		k.snaps[rev] = s
		return
	}
	for r, s := range k.snaps {
		if now.Sub(s.at) > snapshotTTL {
			delete(k.snaps, r)
		}
	}
	if len(k.snaps) >= maxSnapshots {
		oldest := int64(0)
		for r := range k.snaps {
			if oldest == 0 || r < oldest {
				oldest = r
			}
		}
		delete(k.snaps, oldest)
	}
	k.snaps[rev] = snapshotOf[T]{tree: t, at: now, lists: 1}
}

// release is a paged list's last page at rev: the snapshot goes once no
// other list reads it.
func (k *kindCache[T]) release(rev int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.snaps[rev]
	if !ok {
		return
	}
	if s.lists--; s.lists > 0 {
		k.snaps[rev] = s
		return
	}
	delete(k.snaps, rev)
}

// snapshots is how many paged lists' snapshots are kept.
func (k *kindCache[T]) snapshots() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.snaps)
}

func (k *kindCache[T]) snapshotAt(rev int64) (*btree.BTreeG[entry[T]], bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	s, ok := k.snaps[rev]
	if !ok || time.Since(s.at) > snapshotTTL {
		return nil, false
	}
	return s.tree, true
}

// startFor is the update loop's starting state for key: this node's own
// last write if the copy has not seen it yet, else the copy's record.
func (k *kindCache[T]) startFor(key string) (*cached[T], bool) {
	if !k.isListed() {
		return nil, false
	}
	// Decoded after the lock: cached objects and written bytes are never
	// changed in place, only replaced. The cached object is returned as it
	// is, shared: the update loop only reads a start from the copy, clones
	// it before a mutation, and never returns it (an outcome without a
	// write from the copy is decided again from a read).
	k.mu.RLock()
	e, ok := k.tree.Get(entry[T]{key: key})
	r, rok := k.recent[key]
	k.mu.RUnlock()
	if rok && (!ok || r.rev > e.rev) {
		if r.absent {
			return &cached[T]{}, true
		}
		obj, err := k.codec.decode(&mvccpb.KeyValue{Key: []byte(key), Value: r.raw, ModRevision: r.rev})
		if err != nil {
			k.c.log.Warn("own write does not decode; reading etcd", "key", key, "err", err) // bytes this node encoded: cannot happen
			return nil, false
		}
		return &cached[T]{obj: obj, raw: r.raw, rev: r.rev}, true
	}
	if !ok {
		return &cached[T]{}, true
	}
	if e.err != nil {
		return nil, false // corrupt: let the loop read it and say so
	}
	return &cached[T]{obj: e.object(k.codec, e.rev), raw: e.raw, rev: e.rev}, true
}

// maxRecent bounds the own-writes memo; it empties as the watch catches up.
const maxRecent = 4096

// wrote records this node's write of key (obj nil: deleted) at rev: raw
// is what was written, obj only its decoded form, not kept.
func (k *kindCache[T]) wrote(key string, obj T, raw []byte, rev int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rev <= k.rev {
		return // the copy has it already
	}
	if len(k.recent) >= maxRecent {
		k.clearRecentLocked()
	}
	var zero T
	w := ownWrite{raw: raw, rev: rev, absent: obj == zero}
	if !w.absent && k.node != nil {
		w.node = k.node(obj)
	}
	k.recent[key] = w
	k.markUnseenLocked(key)
}

// clearRecentLocked empties the own-writes memo and its unseen counts.
func (k *kindCache[T]) clearRecentLocked() {
	clear(k.recent)
	k.tally.ResetUnseen()
	clear(k.unseenAt)
}

// markUnseenLocked brings key's place in the unseen counts up to date: it
// counts while recent holds a created record of key that the copy lacks.
func (k *kindCache[T]) markUnseenLocked(key string) {
	if k.node == nil {
		return
	}
	r, inRecent := k.recent[key]
	was, counted := k.unseenAt[key]
	if !inRecent && !counted {
		return // the common case on the watch: not this node's write
	}
	want, now := false, ""
	if inRecent && !r.absent {
		if _, inCopy := k.tree.Get(entry[T]{key: key}); !inCopy {
			want, now = true, r.node
		}
	}
	if counted == want && was == now {
		return
	}
	if counted {
		k.tally.CountUnseen(was, -1)
		delete(k.unseenAt, key)
	}
	if want {
		k.tally.CountUnseen(now, 1)
		k.unseenAt[key] = now
	}
}

// kindOf is the cache of c's kind, if s has a cache.
func kindOf[T object](s *Store, c codec[T]) *kindCache[T] {
	if s.cache == nil {
		return nil
	}
	switch any(c.newObj()).(type) {
	case *shoalv1.Sandbox:
		return any(s.cache.sandboxes).(*kindCache[T])
	case *shoalv1.Provider:
		return any(s.cache.providers).(*kindCache[T])
	}
	return nil
}

// SandboxCounts are the cached sandboxes by phase and node, and the cached
// providers; ok is false without a listed cache (for metrics, read at
// scrape time).
func (s *Store) SandboxCounts() (byPhaseNode map[[2]string]float64, providers int, ok bool) {
	c := s.cache
	if c == nil || !c.sandboxes.isListed() {
		return nil, 0, false
	}
	byPhaseNode = map[[2]string]float64{}
	c.sandboxes.mu.RLock()
	c.sandboxes.tree.Ascend(func(e entry[*shoalv1.Sandbox]) bool {
		if e.err == nil {
			byPhaseNode[[2]string{e.ix.phase.String(), e.ix.owner()}]++
		}
		return true
	})
	c.sandboxes.mu.RUnlock()
	providers, _ = c.providers.counts()
	return byPhaseNode, providers, true
}

// Cache is the store's watch cache, nil without one.
func (s *Store) Cache() *Cache { return s.cache }

// Lag is how many revisions the copy trails the newest etcd revision a
// read has seen (the lesser of the two kinds' applied revisions): 0 when
// it is caught up, or before any read. Revisions made outside the cached
// prefixes count until a progress notification moves the copy past them.
func (c *Cache) Lag() int64 {
	seen := c.seen.Load()
	applied := min(c.sandboxes.appliedRev(), c.providers.appliedRev())
	if seen == 0 || applied >= seen {
		return 0
	}
	return seen - applied
}
