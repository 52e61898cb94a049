package store

import (
	"maps"

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

// InjectStaleForTest puts an older state of a sandbox (at revision rev)
// into the watch cache's copy, as a lagging watch would have left it.
func (s *Store) InjectStaleForTest(sb *shoalv1.Sandbox, rev int64) error {
	raw, err := sandboxCodec.encode(sb)
	if err != nil {
		return err
	}
	obj := clone(sb)
	obj.Meta.ResourceVersion = rev
	key := s.k.sandbox(obj.Meta.Workspace, obj.Meta.Name)
	k := s.cache.sandboxes
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tree.ReplaceOrInsert(entry[*shoalv1.Sandbox]{key: key, record: &record{raw: raw, rev: rev, ix: indexOf(obj)}})
	delete(k.recent, key)
	k.markUnseenLocked(key)
	return nil
}

// RegistryCopyForTest is what the watch cache holds of the node registry:
// the live node ids and the cordoned ones, and whether placement may use it.
func (s *Store) RegistryCopyForTest() (live, cordoned []string, usable bool) {
	c := s.cache
	for _, kv := range c.liveNodes.values() {
		live = append(live, lastSegment(string(kv.Key)))
	}
	for _, kv := range c.cordons.values() {
		cordoned = append(cordoned, lastSegment(string(kv.Key)))
	}
	return live, cordoned, c.liveNodes.usable() && c.cordons.usable()
}

// HoldRegistryCopyForTest saves the cache's copy of the node registry; the
// function it returns puts that copy back, as a watch that lags would
// have left it.
func (s *Store) HoldRegistryCopyForTest() (restore func()) {
	c := s.cache
	var saved []map[string]*mvccpb.KeyValue
	for _, k := range []*keyCache{c.liveNodes, c.cordons} {
		k.mu.RLock()
		saved = append(saved, maps.Clone(k.kvs))
		k.mu.RUnlock()
	}
	return func() {
		for i, k := range []*keyCache{c.liveNodes, c.cordons} {
			k.mu.Lock()
			k.kvs = saved[i]
			k.mu.Unlock()
		}
	}
}

// NodesFromForFuzz builds the node list from raw registry records.
func NodesFromForFuzz(infos, live, cordons, placed []*mvccpb.KeyValue, prefix string) []*shoalv1.Node {
	return nodesFrom(infos, live, cordons, placed, prefix)
}

// ParseLostForFuzz decodes a lost/ record's value.
func ParseLostForFuzz(v []byte) error {
	_, err := parseLost(v)
	return err
}

// DerivedForTest counts the sandbox records of the watch cache's copy that
// keep a derived encoding (Record.Derived), and the records it holds.
func (s *Store) DerivedForTest() (derived, records int) {
	k := s.cache.sandboxes
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.tree.Ascend(func(e entry[*shoalv1.Sandbox]) bool {
		if e.derived.Load() != nil {
			derived++
		}
		records++
		return true
	})
	return derived, records
}
