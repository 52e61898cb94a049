package store

import (
	"maps"
	"math/rand/v2"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
)

// TestUnseenCountsFollowWritesAndWatch drives the own-writes memo and the
// copy through random writes, watch events (in and out of order with the
// writes) and overflows, and checks after every step that the per-node
// unseen counts placement reads equal a walk of the memo against the copy.
func TestUnseenCountsFollowWritesAndWatch(t *testing.T) {
	t.Parallel()
	k := newKindCache(nil, sandboxCodec, "/s/", 1<<20)
	k.node = NodeOf
	keys := []string{"/s/a", "/s/b", "/s/c", "/s/d", "/s/e"}
	nodes := []string{"n1", "n2", "n3"}
	sb := func(key, node string) *shoalv1.Sandbox {
		return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: "s", Name: key[3:], Uid: "u-" + key[3:]}, Spec: &shoalv1.SandboxSpec{Node: node}}
	}
	walk := func() map[string]int {
		want := map[string]int{}
		for key, r := range k.recent {
			if r.absent {
				continue
			}
			if _, ok := k.tree.Get(entry[*shoalv1.Sandbox]{key: key}); !ok {
				want[r.node]++
			}
		}
		return want
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rev := int64(0)
	var queue []*clientv3.Event // writes not yet seen on the watch, in order
	nonzero := 0
	for step := range 20000 {
		key := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(10); {
		case op < 4: // this node writes (create/update or delete)
			rev++
			if rng.IntN(4) == 0 {
				k.wrote(key, nil, nil, rev)
				queue = append(queue, &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}})
			} else {
				obj := sb(key, nodes[rng.IntN(len(nodes))])
				raw, err := sandboxCodec.encode(obj)
				if err != nil {
					t.Fatal(err)
				}
				k.wrote(key, obj, raw, rev)
				queue = append(queue, &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: raw, ModRevision: rev, CreateRevision: rev}})
			}
		case op < 5: // another node writes; the watch brings it with what came before
			rev++
			raw, err := sandboxCodec.encode(sb(key, nodes[rng.IntN(len(nodes))]))
			if err != nil {
				t.Fatal(err)
			}
			queue = append(queue, &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: raw, ModRevision: rev}})
			fallthrough
		default: // the watch delivers some of what is queued
			n := rng.IntN(len(queue) + 1)
			evs := queue[:n:n]
			queue = queue[n:]
			k.apply(evs)
		}
		if step%5000 == 4999 {
			k.mu.Lock()
			k.clearRecentLocked() // as an overflow or a relist does
			k.mu.Unlock()
		}
		if got, want := k.tally.Unseen(), walk(); !maps.Equal(got, want) {
			t.Fatalf("step %d: unseen counts %v, a walk of the memo finds %v", step, got, want)
		}
		if len(k.tally.Unseen()) > 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("no step left an unseen create: the test did not exercise the counts")
	}
}
