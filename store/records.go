package store

import (
	"context"
	"time"

	shoalv1 "shoal/api/shoal/v1"
)

// Records are a whole list for a caller that orders it by something other
// than the key, cuts a page out of it and sends the page in an encoding of
// its own (OpenShell's lists, package openshellapi: by creation time, by
// offset). A Record says what it is ordered by without decoding anything:
// from the watch cache, its index (cacheindex.go) holds the creation time;
// the caller decodes only the records it returns. A cached record also
// keeps the last encoding derived from it (Derived), so a list answered
// again costs no decoding, converting or encoding of the records that did
// not change: the derived bytes belong to that version of the record and
// go with it when the record changes or goes (a paged list's snapshot that
// still holds the old version holds them until it goes, snapshotTTL at
// most), so they are as many as the records held, one encoding each.

// Record is one record of a whole list, not decoded. It is small (a list
// makes one of every record it keeps, on every call, and most are
// dropped): what it does not hold itself it reads from the cache's
// record.
type Record[T object] struct {
	key string
	obj T       // decoded, when the list read etcd
	rec *record // the cache's record, or one made for this list from etcd
}

// Workspace and Name are the record's, from its key.
func (r Record[T]) Workspace() string { ws, _ := keyRef(r.key); return ws }
func (r Record[T]) Name() string      { _, name := keyRef(r.key); return name }

// CreatedAt is meta.created_at (the Unix epoch if unset), from the index.
func (r Record[T]) CreatedAt() time.Time {
	return time.Unix(r.rec.ix.createdSec, int64(r.rec.ix.createdNanos))
}

// A Derivation names an encoding that callers derive from records
// (Record.Derived). A record keeps one derived encoding: two Derivations
// used on the same records would take turns replacing each other's, which
// stays correct but saves nothing.
type Derivation struct{ name string }

// NewDerivation returns a Derivation; name is for people reading a dump.
func NewDerivation(name string) *Derivation { return &Derivation{name: name} }

// derived is a record's derived encoding, and the Derivation that made it.
type derived struct {
	by *Derivation
	b  []byte
}

// EachSandboxRecord lists, as ListSandboxes with no limit does (at one
// revision, from the watch cache where it can), the sandboxes of a
// workspace ("" for all) that match keep, and calls each with each one's
// Record, in key order, rather than making a list of them: a caller that
// keeps a page of them keeps only the page. The page it returns has no
// items: its revision and warnings.
func (s *Store) EachSandboxRecord(ctx context.Context, ws string, keep func(*shoalv1.Sandbox) bool, each func(Record[*shoalv1.Sandbox])) (Page[struct{}], error) {
	page, err := list(ctx, s, sandboxCodec, s.sandboxPrefix(ws), ListOptions{}, keep,
		func(key string, raw []byte, rev int64, obj *shoalv1.Sandbox, cached *record) struct{} {
			each(recordOf(key, raw, rev, obj, cached))
			return struct{}{}
		})
	page.Items = nil
	return page, err
}

// recordOf is the Record of a listed record (list's itemFunc).
func recordOf[T object](key string, raw []byte, rev int64, obj T, cached *record) Record[T] {
	if cached != nil {
		return Record[T]{key: key, rec: cached}
	}
	// Read from etcd: a record of its own, with only what CreatedAt
	// reads of an index, which keeps nothing derived beyond this list.
	rec := &record{raw: raw, rev: rev}
	if c := obj.GetMeta().GetCreatedAt(); c != nil {
		rec.ix.createdSec, rec.ix.createdNanos = c.GetSeconds(), c.GetNanos()
	}
	return Record[T]{key: key, obj: obj, rec: rec}
}

// Object is the record decoded, an object of the caller's own.
func (r Record[T]) Object() T {
	var none T
	if r.obj != none {
		return r.obj
	}
	return codecOf[T]().decoded(r.key, r.rec.raw, r.rec.rev, none, nil)
}

// Derived is d's encoding of the record: the one the record keeps if d
// made it, else encode(r.Object()), which the record then keeps. A record
// of the watch cache keeps it until it changes or goes; one read from
// etcd (the cache was not caught up) only for the list that read it.
// encode must depend on the object alone (its resource version included),
// and no one may change its bytes: every caller shares them. An error is
// returned and not kept.
func (r Record[T]) Derived(d *Derivation, encode func(T) ([]byte, error)) ([]byte, error) {
	if m := r.rec.derived.Load(); m != nil && m.by == d {
		return m.b, nil
	}
	b, err := encode(r.Object())
	if err != nil {
		return nil, err
	}
	r.rec.derived.Store(&derived{by: d, b: b})
	return b, nil
}

// codecOf is the codec of T.
func codecOf[T object]() codec[T] {
	var none T
	switch any(none).(type) {
	case *shoalv1.Sandbox:
		return any(sandboxCodec).(codec[T])
	case *shoalv1.Provider:
		return any(providerCodec).(codec[T])
	}
	panic("store: no codec for this kind")
}
