package store

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	shoalv1 "shoal/api/shoal/v1"
)

// fill sets every field of m, recursively (every map and list two
// entries, every oneof's first case), each to a value of its own, so that
// a decoder that drops, mixes up or mangles any field is seen.
func fill(m protoreflect.Message, n *int, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && o.Fields().Get(0) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range 2 {
				k := scalar(fd.MapKey(), n).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v := mp.NewValue()
					if depth < 4 {
						fill(v.Message(), n, depth+1)
					}
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(fd.MapValue(), n))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					v := l.NewElement()
					if depth < 4 {
						fill(v.Message(), n, depth+1)
					}
					l.Append(v)
				} else {
					l.Append(scalar(fd, n))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if depth < 4 {
				fill(m.Mutable(fd).Message(), n, depth+1)
			}
		default:
			m.Set(fd, scalar(fd, n))
		}
	}
}

// scalar is the next distinct value of fd's kind.
func scalar(fd protoreflect.FieldDescriptor, n *int) protoreflect.Value {
	*n++
	v := *n
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(v % vals.Len()).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-v))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(-v) << 33)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(v) << 33)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(v) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d-é", v))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(v), 0, 0xff})
	}
	panic(fmt.Sprintf("field %s: kind %s not filled", fd.FullName(), fd.Kind()))
}

// The cache's decoder of bytes it accepted before (redecode, generated
// code) gives what decode (protobuf-go) gives: every field of a sandbox
// and a provider, with an unknown field among them, and in the encoding a
// list's items have (a second meta with the resource version).
func TestRedecodeMatchesDecode(t *testing.T) {
	check := func(t *testing.T, c interface {
		both(key string, raw []byte, rev int64) (proto.Message, proto.Message, error)
	}, obj proto.Message, ws, name string) {
		t.Helper()
		n := 0
		fill(obj.ProtoReflect(), &n, 0)
		meta := obj.ProtoReflect().Get(obj.ProtoReflect().Descriptor().Fields().ByName("meta")).Message().Interface().(*shoalv1.ObjectMeta)
		meta.Name, meta.Workspace, meta.ResourceVersion = name, ws, 0
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		key := "/shoal/x/" + ws + "/" + name
		unknown := protowire.AppendTag(append([]byte(nil), raw...), 9999, protowire.BytesType)
		unknown = protowire.AppendString(unknown, "from a newer node")
		for what, b := range map[string][]byte{"every field": raw, "with an unknown field": unknown} {
			want, got, err := c.both(key, b, 42)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !proto.Equal(want, got) {
				t.Errorf("%s: redecode gives\n%v\ndecode gives\n%v", what, got, want)
			}
			if n < 20 {
				t.Fatalf("only %d values filled", n)
			}
		}
	}
	t.Run("sandbox", func(t *testing.T) { check(t, both[*shoalv1.Sandbox]{sandboxCodec}, &shoalv1.Sandbox{}, "ws", "sb") })
	t.Run("provider", func(t *testing.T) { check(t, both[*shoalv1.Provider]{providerCodec}, &shoalv1.Provider{}, "ws", "p") })
}

// both decodes raw with decode and with redecode; and the encoding of a
// list's item (encoded) with proto.Unmarshal, which must give the same.
type both[T object] struct{ c codec[T] }

func (b both[T]) both(key string, raw []byte, rev int64) (proto.Message, proto.Message, error) {
	want, err := b.c.decode(&mvccpb.KeyValue{Key: []byte(key), Value: raw, ModRevision: rev})
	if err != nil {
		return nil, nil, err
	}
	// The generated decoder itself, not redecode's fallback to decode.
	direct := b.c.newObj()
	if err := any(direct).(vtUnmarshaler).UnmarshalVT(raw); err != nil {
		return nil, nil, fmt.Errorf("the generated decoder refused what decode took: %v", err)
	}
	direct.GetMeta().ResourceVersion = rev
	if !proto.Equal(want, direct) {
		return nil, nil, fmt.Errorf("the generated decoder gives\n%v\nnot\n%v", direct, want)
	}
	got := b.c.redecode(key, raw, rev)
	var zero T
	if !proto.Equal(want, b.c.decoded(key, raw, rev, zero, nil)) {
		return nil, nil, fmt.Errorf("decoded (a cached read) differs from decode")
	}
	item := b.c.newObj()
	if err := proto.Unmarshal(b.c.encoded(key, raw, rev, zero, nil), item); err != nil {
		return nil, nil, err
	}
	if !proto.Equal(want, item) {
		return nil, nil, fmt.Errorf("a list item's encoding decodes to\n%v\nnot\n%v", item, want)
	}
	return want, got, nil
}
