package store

import (
	"slices"
	"unique"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
)

// The watch cache keeps each record as its stored bytes and a small
// decoded index, and decodes the bytes again on every read that returns
// the object (a Get, a list's items, a watch's initial state): a decoded
// protobuf is several times its bytes, and the copy holds every record of
// the fleet, while reads return only some of them and had to clone the
// cached object anyway. The index is what lists, watches and placement
// filter and count by without decoding: uid, labels, deletion, and for a
// sandbox its node and phase; and the creation time, which a list in
// creation order (EachSandboxRecord, records.go) sorts by.

// index is the decoded part of a cached record. Its strings other than
// the uid are interned (a fleet has few node names and label keys).
type index struct {
	uid string
	// labels: key, value, key, value, … sorted by key.
	labels     []string
	deleted    *timestamppb.Timestamp // meta.deletion_timestamp
	node       string                 // sandbox spec.node
	statusNode string                 // sandbox status.node
	phase      shoalv1.SandboxPhase
	// meta.created_at, as Unix seconds and nanoseconds (0, 0 if unset).
	createdNanos int32
	createdSec   int64
}

// owner is NodeOf on the index.
func (ix *index) owner() string {
	if ix.node != "" {
		return ix.node
	}
	return ix.statusNode
}

func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// indexOf is the index of a decoded record.
func indexOf[T object](obj T) index {
	m := obj.GetMeta()
	ix := index{uid: m.GetUid(), deleted: m.GetDeletionTimestamp()}
	if c := m.GetCreatedAt(); c != nil {
		ix.createdSec, ix.createdNanos = c.GetSeconds(), c.GetNanos()
	}
	if l := m.GetLabels(); len(l) > 0 {
		keys := make([]string, 0, len(l))
		for k := range l {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		ix.labels = make([]string, 0, 2*len(l))
		for _, k := range keys {
			ix.labels = append(ix.labels, intern(k), intern(l[k]))
		}
	}
	if sb, ok := any(obj).(*shoalv1.Sandbox); ok {
		ix.node, ix.statusNode = intern(sb.GetSpec().GetNode()), intern(sb.GetStatus().GetNode())
		ix.phase = sb.GetStatus().GetPhase()
	}
	return ix
}

// view is what a filter (a list's or a watch's keep) sees of cached
// records without decoding them: one skeleton object, refilled for each
// record, with its meta's name, workspace, uid, labels, deletion timestamp
// and resource version, and for a sandbox spec.node, status.node and
// status.phase. Every keep in the tree reads no more, and none keeps what
// it is given: a walk of 10,000 records allocates nothing per record.
type view[T object] struct {
	obj    T
	meta   *shoalv1.ObjectMeta
	spec   *shoalv1.SandboxSpec
	status *shoalv1.SandboxStatus
	labels map[string]string
}

func newView[T object](c codec[T]) *view[T] {
	v := &view[T]{obj: c.newObj(), meta: &shoalv1.ObjectMeta{}, labels: map[string]string{}}
	setMeta(v.obj, v.meta)
	if sb, ok := any(v.obj).(*shoalv1.Sandbox); ok {
		v.spec, v.status = &shoalv1.SandboxSpec{}, &shoalv1.SandboxStatus{}
		sb.Spec, sb.Status = v.spec, v.status
	}
	return v
}

// of fills the skeleton with e (valid until the next call).
func (v *view[T]) of(e *entry[T]) T {
	ws, name := keyRef(e.key)
	clear(v.labels)
	for i := 0; i+1 < len(e.ix.labels); i += 2 {
		v.labels[e.ix.labels[i]] = e.ix.labels[i+1]
	}
	*v.meta = shoalv1.ObjectMeta{Name: name, Workspace: ws, Uid: e.ix.uid, ResourceVersion: e.rev, DeletionTimestamp: e.ix.deleted, Labels: v.labels}
	if v.spec != nil {
		*v.spec = shoalv1.SandboxSpec{Node: e.ix.node}
		*v.status = shoalv1.SandboxStatus{Node: e.ix.statusNode, Phase: e.ix.phase}
	}
	return v.obj
}

// newEntry decodes kv into a cache entry; it returns the decoded object
// too (nil if it does not decode), for the caller's event.
func newEntry[T object](c codec[T], kv *mvccpb.KeyValue) (entry[T], T) {
	e := entry[T]{key: string(kv.Key), record: &record{raw: kv.Value, rev: kv.ModRevision}}
	obj, err := c.decode(kv)
	if e.err = err; err == nil {
		e.ix = indexOf(obj)
	}
	return e, obj
}

// object decodes a cached record that decoded when it was cached (so it
// decodes again: the bytes are the same) at revision rev.
func (e *entry[T]) object(c codec[T], rev int64) T {
	var none T
	return c.decoded(e.key, e.raw, rev, none, nil)
}
