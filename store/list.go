package store

import (
	"context"
	"errors"
	"strings"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// ListOptions page through a list at one revision, as Kubernetes does: the
// first page fixes the revision, later pages read at it, so a paged list is a
// consistent snapshot.
type ListOptions struct {
	// Limit on returned items; 0 means all.
	Limit int64
	// MaxBytes ends a page early once its items' stored bytes reach it
	// (a page holds at least one item); 0 means no byte limit.
	MaxBytes int
	// After: return keys strictly after this one (from a previous page).
	// It must lie inside the listed prefix.
	After string
	// Revision to read at; 0 means the latest.
	Revision int64
}

// Page is one page of a list.
type Page[T any] struct {
	Items []T
	// Next is set when more items may follow; pass it as the next ListOptions.
	Next *ListOptions
	// Revision the page was read at.
	Revision int64
	// Warnings name records that were skipped because they do not decode.
	Warnings []string
}

// ListSandboxes lists sandboxes of a workspace ("" for all) that match keep
// (nil keeps all). keep must not change or keep what it is given, and may
// read only meta (name, workspace, uid, labels, deletion timestamp),
// spec.node, status.node and status.phase: from the watch cache it is a
// view of the cached record's index, not the decoded record
// (cacheindex.go).
func (s *Store) ListSandboxes(ctx context.Context, ws string, o ListOptions, keep func(*shoalv1.Sandbox) bool) (Page[*shoalv1.Sandbox], error) {
	return list(ctx, s, sandboxCodec, s.sandboxPrefix(ws), o, keep, sandboxCodec.decoded)
}

// ListSandboxesEncoded is ListSandboxes with each item as the protobuf
// encoding of the sandbox ListSandboxes returns (codec.encoded), made of
// the stored bytes without decoding them when the watch cache serves the
// list: the API sends it as it is.
func (s *Store) ListSandboxesEncoded(ctx context.Context, ws string, o ListOptions, keep func(*shoalv1.Sandbox) bool) (Page[[]byte], error) {
	return list(ctx, s, sandboxCodec, s.sandboxPrefix(ws), o, keep, sandboxCodec.encoded)
}

func (s *Store) sandboxPrefix(ws string) string {
	if ws == "" {
		return s.k.allSandboxes()
	}
	return s.k.sandboxes(ws)
}

// ListProviders lists providers of a workspace ("" for all) that match
// keep, which reads only the meta fields ListSandboxes's keep may.
func (s *Store) ListProviders(ctx context.Context, ws string, o ListOptions, keep func(*shoalv1.Provider) bool) (Page[*shoalv1.Provider], error) {
	prefix := s.k.allProviders()
	if ws != "" {
		prefix = s.k.providers(ws)
	}
	return list(ctx, s, providerCodec, prefix, o, keep, providerCodec.decoded)
}

const listBatch = 500

// An itemFunc makes a list's item of a record it keeps, a record that
// decodes: of its key, stored bytes and revision, of the object decoded,
// when the list had to decode it anyway (else the zero T), and of the
// watch cache's record, when the cache served the list (else nil).
type itemFunc[T object, I any] func(key string, raw []byte, rev int64, obj T, cached *record) I

// list reads keys of prefix only: a continuation key outside it is refused,
// so no caller can make a list decode another kind's records. A record
// that does not decode is skipped, reported once in the log and named in
// the page's warnings.
func list[T object, I any](ctx context.Context, s *Store, c codec[T], prefix string, o ListOptions, keep func(T) bool, item itemFunc[T, I]) (Page[I], error) {
	var page Page[I]
	start := prefix
	if o.After != "" {
		if !strings.HasPrefix(o.After, prefix) || len(o.After) == len(prefix) {
			return page, shoal.Invalid("page_token", "continues a list of another prefix")
		}
		start = o.After + "\x00"
	}
	if o.Revision < 0 {
		return page, shoal.Invalid("page_token", "has a negative revision")
	}
	if k := kindOf(s, c); k != nil && strings.HasPrefix(prefix, k.prefix) {
		if page, ok, err := listCached(ctx, k, prefix, start, o, keep, item); ok || err != nil {
			return page, err
		}
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	rev := o.Revision
	size, last := 0, ""
	for {
		batch := int64(listBatch)
		if o.Limit > 0 {
			batch = min(batch, o.Limit-int64(len(page.Items))+1)
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(batch)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.c.Get(ctx, start, opts...)
		if errors.Is(err, rpctypes.ErrCompacted) {
			return page, shoal.Gone("the list's snapshot (revision %d) was compacted away; start the list again without a page token", rev)
		}
		if err != nil {
			return page, etcdErr(ctx, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		page.Revision = rev
		for _, kv := range resp.Kvs {
			obj, err := c.decode(kv)
			if err != nil {
				s.report(string(kv.Key), kv.ModRevision, err)
				page.Warnings = append(page.Warnings, err.Error())
				continue
			}
			if keep != nil && !keep(obj) {
				continue
			}
			full := o.Limit > 0 && int64(len(page.Items)) == o.Limit
			if !full && o.MaxBytes > 0 && len(page.Items) > 0 && size+len(kv.Value) > o.MaxBytes {
				full = true
			}
			if full {
				// One more match exists: the page is full.
				page.Next = &ListOptions{Limit: o.Limit, MaxBytes: o.MaxBytes, After: last, Revision: rev}
				return page, nil
			}
			page.Items = append(page.Items, item(string(kv.Key), kv.Value, kv.ModRevision, obj, nil))
			size += len(kv.Value)
			last = string(kv.Key)
		}
		if !resp.More {
			return page, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// listCached serves a list from the watch cache: a first page from a
// clone of the copy once it has caught up with etcd, a later page from the
// first page's clone. ok is false when the cache cannot serve it (not
// caught up, or the snapshot is gone): the caller reads etcd.
func listCached[T object, I any](ctx context.Context, k *kindCache[T], prefix, start string, o ListOptions, keep func(T) bool, item itemFunc[T, I]) (page Page[I], ok bool, err error) {
	var tree *btree.BTreeG[entry[T]]
	if o.Revision != 0 {
		if tree, ok = k.snapshotAt(o.Revision); !ok {
			return page, false, nil
		}
		page.Revision = o.Revision
	} else {
		fresh, err := k.waitFresh(ctx)
		if err != nil || !fresh {
			return page, false, err
		}
		tree, page.Revision = k.snapshot()
	}
	size, full, last := 0, false, ""
	v := newView(k.codec)
	tree.AscendGreaterOrEqual(entry[T]{key: start}, func(e entry[T]) bool {
		if !strings.HasPrefix(e.key, prefix) {
			return false
		}
		if e.err != nil {
			page.Warnings = append(page.Warnings, e.err.Error())
			return true
		}
		if keep != nil && !keep(v.of(&e)) {
			return true
		}
		if o.Limit > 0 && int64(len(page.Items)) == o.Limit ||
			o.MaxBytes > 0 && len(page.Items) > 0 && size+len(e.raw) > o.MaxBytes {
			full = true // one more match exists: the page is full
			return false
		}
		var none T // not decoded: only the index was read
		page.Items = append(page.Items, item(e.key, e.raw, e.rev, none, e.record))
		size += len(e.raw)
		last = e.key
		return true
	})
	switch {
	case full:
		page.Next = &ListOptions{Limit: o.Limit, MaxBytes: o.MaxBytes, After: last, Revision: page.Revision}
		if o.Revision == 0 {
			k.keep(page.Revision, tree)
		}
	case o.Revision != 0:
		k.release(o.Revision) // the list's last page
	}
	return page, true, nil
}
