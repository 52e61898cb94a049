package store

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	"shoal/internal/chaosbreak"
)

// Fence is the fencing token of a leader-only write: the leader's election
// key and that key's create revision, as etcd's concurrency.Election
// exposes them (Key, Rev). The lease that won the election owns the token
// (lease.Leadership is one); the store builds the compare from it, so a
// deposed leader's write fails even while it still believes it leads.
type Fence interface {
	Key() string
	Rev() int64
}

// ErrFenced is returned for a fenced write after leadership was lost: the
// Txn's compare of the leader key's create revision failed.
var ErrFenced = &shoal.Error{Kind: shoal.KindUnavailable, Msg: "write fenced out: this node no longer holds the leader lease"}

// fenceCmp is the compare every leader-only Txn carries: the leader key
// still exists with the create revision it had when f's term began.
func fenceCmp(f Fence) clientv3.Cmp {
	if chaosbreak.Is("unfenced-leader") {
		// Holds whether or not the leader key exists: no fence at all.
		return clientv3.Compare(clientv3.CreateRevision(f.Key()), "<", f.Rev()+1)
	}
	return clientv3.Compare(clientv3.CreateRevision(f.Key()), "=", f.Rev())
}

// fenceLost reports, from the fence key as a refused Txn's Else branch
// read it, whether the refusal was the fence's: the leader key is gone or
// another's.
func fenceLost(f Fence, kvs []*mvccpb.KeyValue) bool {
	if chaosbreak.Is("unfenced-leader") {
		// A build without the fence compare cannot tell a lost fence
		// either: another compare's refusal must not end its term (with
		// the watch cache a stale start refuses the first Txn often).
		return false
	}
	return len(kvs) == 0 || kvs[0].CreateRevision != f.Rev()
}
