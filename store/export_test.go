package store

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	shoalv1 "shoal/api/shoal/v1"
)

// DecodeForFuzz decodes kv as a sandbox or a provider.
func DecodeForFuzz(kind string, kv *mvccpb.KeyValue) (interface{ GetMeta() *shoalv1.ObjectMeta }, error) {
	if kind == "provider" {
		return providerCodec.decode(kv)
	}
	return sandboxCodec.decode(kv)
}
