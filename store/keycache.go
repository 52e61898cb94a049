package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyCache is a watch-fed copy of the raw keys under one prefix, for
// choices that need no consistent read because the Txn that acts on them
// compares what was chosen from: placement picks a node from the copy of
// the node registry (its live keys and cordons) and the create's Txn
// compares that node's live key at the revision the copy had and that it
// is not cordoned, so a stale copy costs a retry (from etcd), never a
// sandbox on a node that left, was cordoned or changed its labels
// (placeFromCopy in sandbox.go).
//
// It follows its prefix like a kindCache (follow): listed once, watched
// from the list's revision, resumed after a break, listed again only
// after a compaction. While its watch is not established, usable reports
// false and callers read etcd.
type keyCache struct {
	c      *Cache
	prefix string

	watching atomic.Bool
	listed   chan struct{}
	once     sync.Once

	mu  sync.RWMutex
	kvs map[string]*mvccpb.KeyValue
	rev int64
}

func newKeyCache(c *Cache, prefix string) *keyCache {
	return &keyCache{c: c, prefix: prefix, listed: make(chan struct{}), kvs: map[string]*mvccpb.KeyValue{}}
}

// usable: listed and watching now.
func (k *keyCache) usable() bool {
	select {
	case <-k.listed:
		return k.watching.Load()
	default:
		return false
	}
}

// values are the cached key-values (shared: callers must not change them).
func (k *keyCache) values() []*mvccpb.KeyValue {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]*mvccpb.KeyValue, 0, len(k.kvs))
	for _, kv := range k.kvs {
		out = append(out, kv)
	}
	return out
}

func (k *keyCache) run(ctx context.Context) {
	follow(ctx, k.c, k.prefix, k.list, k.watch)
}

// list reads the prefix at one revision. The registry is small (a few
// keys per node), so one range read does.
func (k *keyCache) list(ctx context.Context) error {
	resp, err := k.c.s.c.Get(ctx, k.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	kvs := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		kvs[string(kv.Key)] = kv
	}
	k.mu.Lock()
	k.kvs, k.rev = kvs, resp.Header.Revision
	k.mu.Unlock()
	k.once.Do(func() { close(k.listed) })
	return nil
}

func (k *keyCache) watch(ctx context.Context) (compacted, delivered bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	k.mu.RLock()
	from := k.rev + 1
	k.mu.RUnlock()
	k.c.watches.Add(1)
	wch := k.c.s.c.Watch(wctx, k.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithCreatedNotify())
	defer k.watching.Store(false)
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0, delivered, err
		}
		delivered = true
		if wr.Created {
			k.watching.Store(true)
			continue
		}
		k.mu.Lock()
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				delete(k.kvs, string(ev.Kv.Key))
			} else {
				k.kvs[string(ev.Kv.Key)] = ev.Kv
			}
			k.rev = max(k.rev, ev.Kv.ModRevision)
		}
		k.mu.Unlock()
	}
	if ctx.Err() != nil {
		return false, delivered, nil
	}
	return false, delivered, errors.New("watch channel closed")
}
