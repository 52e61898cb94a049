package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
)

// ListOptions page through a list at one revision, as Kubernetes does: the
// first page fixes the revision, later pages read at it, so a paged list is a
// consistent snapshot.
type ListOptions struct {
	// Limit on returned items; 0 means all.
	Limit int64
	// After: return keys strictly after this one (from a previous page).
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
}

// ListSandboxes lists sandboxes of a workspace ("" for all) that match keep
// (nil keeps all).
func (s *Store) ListSandboxes(ctx context.Context, ws string, o ListOptions, keep func(*shoalv1.Sandbox) bool) (Page[*shoalv1.Sandbox], error) {
	prefix := s.k.allSandboxes()
	if ws != "" {
		prefix = s.k.sandboxes(ws)
	}
	return list(ctx, s, sandboxCodec, prefix, o, keep)
}

// ListProviders lists providers of a workspace ("" for all).
func (s *Store) ListProviders(ctx context.Context, ws string, o ListOptions, keep func(*shoalv1.Provider) bool) (Page[*shoalv1.Provider], error) {
	prefix := s.k.allProviders()
	if ws != "" {
		prefix = s.k.providers(ws)
	}
	return list(ctx, s, providerCodec, prefix, o, keep)
}

const listBatch = 500

func list[T object](ctx context.Context, s *Store, c codec[T], prefix string, o ListOptions, keep func(T) bool) (Page[T], error) {
	var page Page[T]
	start := prefix
	if o.After != "" {
		start = o.After + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	rev := o.Revision
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
				return page, err
			}
			if keep != nil && !keep(obj) {
				continue
			}
			if o.Limit > 0 && int64(len(page.Items)) == o.Limit {
				// One more match exists: the page is full.
				page.Next = &ListOptions{Limit: o.Limit, After: lastKey(page.Items, prefix, s), Revision: rev}
				return page, nil
			}
			page.Items = append(page.Items, obj)
		}
		if !resp.More {
			return page, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func lastKey[T object](items []T, prefix string, s *Store) string {
	m := items[len(items)-1].GetMeta()
	switch any(items[0]).(type) {
	case *shoalv1.Provider:
		return s.k.provider(m.GetWorkspace(), m.GetName())
	default:
		return s.k.sandbox(m.GetWorkspace(), m.GetName())
	}
}
