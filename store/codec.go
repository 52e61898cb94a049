package store

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

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
// version cleared so that it stays the key's ModRevision only.
func (c codec[T]) encode(obj T) ([]byte, error) {
	m := obj.GetMeta()
	rv := m.GetResourceVersion()
	if m != nil {
		m.ResourceVersion = 0
		defer func() { m.ResourceVersion = rv }()
	}
	return marshal.Marshal(obj)
}

func (c codec[T]) decode(kv *mvccpb.KeyValue) (T, error) {
	obj := c.newObj()
	if err := proto.Unmarshal(kv.Value, obj); err != nil {
		var zero T
		return zero, fmt.Errorf("decode %s at %s: %w", c.kind, kv.Key, err)
	}
	if obj.GetMeta() == nil {
		// Keep every object's meta non-nil for callers.
		setMeta(obj, &shoalv1.ObjectMeta{})
	}
	obj.GetMeta().ResourceVersion = kv.ModRevision
	return obj, nil
}

func setMeta(obj proto.Message, m *shoalv1.ObjectMeta) {
	switch o := obj.(type) {
	case *shoalv1.Sandbox:
		o.Meta = m
	case *shoalv1.Provider:
		o.Meta = m
	}
}
