package store

import (
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// object is what the store keeps: a protobuf message with an ObjectMeta.
type object interface {
	comparable
	proto.Message
	GetMeta() *shoalv1.ObjectMeta
}

type codec[T object] struct {
	kind   string
	newObj func() T
}

var (
	sandboxCodec  = codec[*shoalv1.Sandbox]{kind: "sandbox", newObj: func() *shoalv1.Sandbox { return &shoalv1.Sandbox{} }}
	providerCodec = codec[*shoalv1.Provider]{kind: "provider", newObj: func() *shoalv1.Provider { return &shoalv1.Provider{} }}
)

var marshal = proto.MarshalOptions{Deterministic: true}

// encode returns the stored bytes of obj: deterministic, with the resource
// version cleared so that it stays the key's ModRevision only. An object
// over MaxStoredBytes is refused: the worst transaction the store builds
// for it would no longer fit etcd's request limit (see limits.go).
func (c codec[T]) encode(obj T) ([]byte, error) {
	m := obj.GetMeta()
	rv := m.GetResourceVersion()
	if m != nil {
		m.ResourceVersion = 0
		defer func() { m.ResourceVersion = rv }()
	}
	b, err := marshal.Marshal(obj)
	if err != nil {
		return nil, shoal.Invalid(c.kind, "cannot be encoded: %v", err)
	}
	if len(b) > MaxStoredBytes {
		return nil, shoal.Invalid(c.kind, "%s %q would be %d bytes stored; at most %d are allowed", c.kind, m.GetName(), len(b), MaxStoredBytes)
	}
	return b, nil
}

// decode reads a stored object. A value that does not decode, or whose
// name does not match its key, is a *shoal.Error of KindDataLoss naming
// the key: the record is corrupt and can only be deleted.
func (c codec[T]) decode(kv *mvccpb.KeyValue) (T, error) {
	obj := c.newObj()
	var zero T
	if err := proto.Unmarshal(kv.Value, obj); err != nil {
		return zero, c.corrupt(kv, err.Error())
	}
	if obj.GetMeta() == nil {
		// Keep every object's meta non-nil for callers.
		setMeta(obj, &shoalv1.ObjectMeta{})
	}
	ws, name := keyRef(string(kv.Key))
	if m := obj.GetMeta(); m.GetName() != name || m.GetWorkspace() != ws || m.GetUid() == "" {
		return zero, c.corrupt(kv, "its meta does not match its key")
	}
	obj.GetMeta().ResourceVersion = kv.ModRevision
	return obj, nil
}

func (c codec[T]) corrupt(kv *mvccpb.KeyValue, why string) error {
	ws, name := keyRef(string(kv.Key))
	fix := fmt.Sprintf("`shoal %s delete %s -w %s`", c.kind, name, ws)
	if !IsName(ws) || !IsName(name) {
		// No API call can name it: only etcd can remove it.
		fix = fmt.Sprintf("with etcdctl: `etcdctl del %q`", kv.Key)
	}
	return shoal.DataLoss("%s %q in workspace %q is corrupt in etcd (key %q, revision %d: %s); it can only be deleted, %s",
		c.kind, name, ws, kv.Key, kv.ModRevision, why, fix)
}

// IsName reports whether s is a name the API takes for objects,
// workspaces and nodes: a DNS-1123 label.
func IsName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// decoded is a record that decoded before (a list's item, a cached
// record) as an object: obj if the caller has it decoded, else its bytes
// decoded again (redecode), a fresh object the reader may change.
func (c codec[T]) decoded(key string, raw []byte, rev int64, obj T, _ *record) T {
	var none T
	if obj != none {
		return obj
	}
	return c.redecode(key, raw, rev)
}

// vtUnmarshaler is the generated decoder every stored kind has
// (api/shoal/v1/shoal_vtproto.pb.go, `make proto`).
type vtUnmarshaler interface{ UnmarshalVT([]byte) error }

var (
	_ vtUnmarshaler = (*shoalv1.Sandbox)(nil)
	_ vtUnmarshaler = (*shoalv1.Provider)(nil)
)

// redecode decodes bytes that decode accepted before with the generated
// decoder: the same object (TestRedecodeMatchesDecode) several times
// faster, the reflective decoding of maps being most of a cached read's
// time. The generated code does not check that strings are UTF-8, which
// is why it only ever sees bytes proto.Unmarshal accepted, and the meta's
// match with the key was checked then too. Should it fail (it cannot on
// such bytes), decode has the last word; bytes neither accepts (cannot
// happen either) give the key's stub.
func (c codec[T]) redecode(key string, raw []byte, rev int64) T {
	obj := c.newObj()
	if u, ok := any(obj).(vtUnmarshaler); ok && u.UnmarshalVT(raw) == nil {
		if obj.GetMeta() == nil {
			setMeta(obj, &shoalv1.ObjectMeta{})
		}
		obj.GetMeta().ResourceVersion = rev
		return obj
	}
	obj, err := c.decode(&mvccpb.KeyValue{Key: []byte(key), Value: raw, ModRevision: rev})
	if err != nil {
		return c.stub(key, rev)
	}
	return obj
}

// encoded is a record that decoded before as the protobuf encoding of
// the object decoded returns, without decoding it: a copy of the stored
// bytes, which hold no resource version (encode clears it), followed by a
// second meta holding only rev. A decoder merges a message field that
// occurs twice, and of a scalar keeps the last, so the two decode to the
// same object: its meta, with the resource version rev.
func (c codec[T]) encoded(_ string, raw []byte, rev int64, _ T, _ *record) []byte {
	b := make([]byte, 0, len(raw)+2+1+protowire.SizeVarint(uint64(rev)))
	b = append(b, raw...)
	b = protowire.AppendTag(b, metaField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(1+protowire.SizeVarint(uint64(rev))))
	b = protowire.AppendTag(b, resourceVersionField, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(rev))
}

// The field numbers encoded writes: every stored kind has its ObjectMeta
// as meta, at the number Sandbox has it.
var (
	metaField            = (&shoalv1.Sandbox{}).ProtoReflect().Descriptor().Fields().ByName("meta").Number()
	resourceVersionField = (&shoalv1.ObjectMeta{}).ProtoReflect().Descriptor().Fields().ByName("resource_version").Number()
)

// stub is what is known of a corrupt record: its name and workspace, from
// its key. Watchers get it in the DELETED event of such a record.
func (c codec[T]) stub(key string, rev int64) T {
	obj := c.newObj()
	ws, name := keyRef(key)
	setMeta(obj, &shoalv1.ObjectMeta{Name: name, Workspace: ws, ResourceVersion: rev})
	return obj
}

// keyRef splits <prefix>/<kind>/<ws>/<name> into ws and name.
func keyRef(key string) (ws, name string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	name, key = key[i+1:], key[:i]
	if j := strings.LastIndexByte(key, '/'); j >= 0 {
		ws = key[j+1:]
	}
	return ws, name
}

func setMeta(obj proto.Message, m *shoalv1.ObjectMeta) {
	switch o := obj.(type) {
	case *shoalv1.Sandbox:
		o.Meta = m
	case *shoalv1.Provider:
		o.Meta = m
	}
}

// corruptLog reports each corrupt record once per revision, so a list or
// watch that skips it again and again does not flood the log.
type corruptLog struct {
	mu   sync.Mutex
	seen map[string]int64 // key → ModRevision reported
	n    int64
}

// report logs err unless this key at this revision was reported already.
func (s *Store) report(key string, rev int64, err error) {
	s.corrupt.mu.Lock()
	if s.corrupt.seen == nil {
		s.corrupt.seen = map[string]int64{}
	}
	if s.corrupt.seen[key] == rev {
		s.corrupt.mu.Unlock()
		return
	}
	if len(s.corrupt.seen) > 10000 {
		clear(s.corrupt.seen) // bounded memory; a re-report is harmless
	}
	s.corrupt.seen[key] = rev
	s.corrupt.n++
	s.corrupt.mu.Unlock()
	s.log.Warn("skipping corrupt record", "key", key, "revision", rev, "err", err)
}

// CorruptRecordsSeen counts the distinct corrupt records (key and
// revision) this store has met in lists and watches.
func (s *Store) CorruptRecordsSeen() int64 {
	s.corrupt.mu.Lock()
	defer s.corrupt.mu.Unlock()
	return s.corrupt.n
}
