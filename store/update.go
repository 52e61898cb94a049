package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	"shoal/internal/chaosbreak"
)

// mutateFunc computes the desired state from the current one. cur is a
// private copy (the zero T when the key is absent); returning the zero T
// deletes the key. Returning a value that encodes to the stored bytes writes
// nothing. A mutateFunc may be called many times and must not have side
// effects beyond reads.
type mutateFunc[T object] func(cur T) (T, error)

// relatedFunc returns the extra compares and ops that must commit atomically
// with a change from old to new (attachment keys, and compares on the
// objects they point at).
type relatedFunc[T object] func(ctx context.Context, old, new T) ([]clientv3.Cmp, []clientv3.Op, error)

type updateSpec[T object] struct {
	codec   codec[T]
	key     string
	pre     Preconditions
	fence   *Fence
	mutate  mutateFunc[T]
	related relatedFunc[T]
	// start, when set, is a copy of the current state taken from a cache;
	// the loop then begins with its Txn and reads only on conflict.
	start *cached[T]
	// intent, when set, is the key of a pending deletion of this object.
	// Unless deleting is set, the write commits only while that key is
	// absent, and its presence ends the loop with FailedPrecondition: once
	// a deletion is requested, ordinary writers stop competing with it.
	intent   string
	deleting bool
	// help completes a pending deletion (intent present, record not yet
	// marked) before an ordinary writer is turned away, so that no reader
	// can see a write refused as "being deleted" and then a live record.
	help func(ctx context.Context, uid string) error
	// committed, if set, receives the revision of the successful Txn.
	committed *int64
}

type cached[T object] struct {
	obj T
	raw []byte
	rev int64
}

// Conflicts before the loop starts to back off: the first retries are
// immediate because the Else branch already returned the fresh state.
const (
	immediateRetries = 3
	backoffBase      = time.Millisecond
	backoffMax       = 50 * time.Millisecond
)

// update is THE read-modify-CAS loop. Every server-driven write of an object
// goes through it:
//
//  1. read the object (or start from a cached copy);
//  2. check the caller's preconditions against it, then apply mutate;
//  3. Txn If(ModRevision(key) == read [, related compares] [, fence])
//     Then(Put or Delete [, related ops])
//     Else(Txn If(Value(key) == bytes read [, same compares]) Then(same ops)
//     Else(Get key [, Get fence key]));
//  4. on failure the Else branch is the fresh state: go to 2 without
//     another read;
//  5. repeat until success or ctx ends. Jittered backoff starts only
//     after repeated conflicts.
//
// Only a caller precondition, a mutate error, a lost fence, the context, an
// etcd call that fails (UNAVAILABLE: the caller may retry) or a stored value
// that does not decode (DATA_LOSS) ends the loop without success. A
// conflict never does.
func update[T object](ctx context.Context, s *Store, u updateSpec[T]) (T, error) {
	var zero T
	cur, raw, rev := zero, []byte(nil), int64(0)
	if u.start != nil {
		cur, raw, rev = u.start.obj, u.start.raw, u.start.rev
	}
	intentSeen, intentUID := false, ""
	// A deletion-protocol write (deleting) ignores the intent, so a cached
	// start needs no read; an ordinary write must see whether one exists.
	if u.start == nil || (u.intent != "" && !u.deleting) {
		ops := []clientv3.Op{clientv3.OpGet(u.key)}
		if u.intent != "" {
			ops = append(ops, clientv3.OpGet(u.intent))
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return zero, etcdErr(ctx, err)
		}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if cur, err = u.codec.decode(kvs[0]); err != nil {
				return zero, err
			}
			raw, rev = kvs[0].Value, kvs[0].ModRevision
		}
		if u.intent != "" {
			if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				intentSeen, intentUID = true, string(kvs[0].Value)
			}
		}
	}

	for attempt := 0; ; attempt++ {
		if intentSeen && !u.deleting && cur != zero {
			if u.help != nil && cur.GetMeta().GetDeletionTimestamp() == nil && cur.GetMeta().GetUid() == intentUID {
				if err := u.help(ctx, intentUID); err != nil && shoal.KindOf(err) != shoal.KindNotFound && shoal.KindOf(err) != shoal.KindConflict {
					return zero, err
				}
			}
			return zero, shoal.FailedPrecondition("%s %q is being deleted", u.codec.kind, lastSegment(u.key))
		}
		if cur == zero && u.pre.set() {
			return zero, shoal.NotFound("%s %q not found", u.codec.kind, lastSegment(u.key))
		}
		if cur != zero {
			if err := u.pre.check(u.codec.kind, cur.GetMeta()); err != nil {
				return zero, err
			}
		}
		var in T
		if cur != zero {
			in = clone(cur)
		}
		next, err := u.mutate(in)
		if err != nil {
			return zero, err
		}
		var val []byte
		switch {
		case cur == zero && next == zero:
			return zero, nil
		case next != zero:
			if val, err = u.codec.encode(next); err != nil {
				return zero, err
			}
			if cur != zero && bytes.Equal(val, raw) {
				return cur, nil // a mutation that changes nothing writes nothing
			}
		}

		var ops []clientv3.Op
		if next == zero {
			ops = append(ops, clientv3.OpDelete(u.key))
		} else {
			ops = append(ops, clientv3.OpPut(u.key, string(val)))
		}
		var extra []clientv3.Cmp
		if u.related != nil {
			rc, ro, err := u.related(ctx, cur, next)
			if err != nil {
				return zero, err
			}
			extra = append(extra, rc...)
			ops = append(ops, ro...)
		}
		if u.fence != nil {
			extra = append(extra, u.fence.cmp())
		}
		if u.intent != "" && !u.deleting && cur != zero {
			extra = append(extra, clientv3.Compare(clientv3.CreateRevision(u.intent), "=", 0))
		}
		elseOps := []clientv3.Op{clientv3.OpGet(u.key)}
		if u.fence != nil {
			elseOps = append(elseOps, clientv3.OpGet(u.fence.Key))
		}
		if u.intent != "" {
			elseOps = append(elseOps, clientv3.OpGet(u.intent))
		}

		// The guard is ModRevision(key) == rev. A write that bumped the
		// revision without changing a byte (a rewrite of the identical
		// value) does not change the state the mutation was computed
		// from, so the Else branch retries the same writes guarded by the
		// exact stored bytes, in the same Txn. Without it a tight loop of
		// identical rewrites by another client could starve the update.
		guard := clientv3.Compare(clientv3.ModRevision(u.key), "=", rev)
		if chaosbreak.Is("skip-compare") && cur != zero {
			guard = clientv3.Compare(clientv3.Version(u.key), ">", 0)
		}
		var sameBytes clientv3.Cmp
		if cur == zero {
			sameBytes = guard // absent stays absent: nothing to fall back to
		} else {
			sameBytes = clientv3.Compare(clientv3.Value(u.key), "=", string(raw))
		}
		resp, err := s.c.Txn(ctx).
			If(append([]clientv3.Cmp{guard}, extra...)...).
			Then(ops...).
			Else(clientv3.OpTxn(append([]clientv3.Cmp{sameBytes}, extra...), ops, elseOps)).
			Commit()
		if err != nil {
			return zero, etcdErr(ctx, err)
		}
		committedAt := resp.Header.Revision
		if !resp.Succeeded {
			resp = (*clientv3.TxnResponse)(resp.Responses[0].GetResponseTxn())
		}
		if resp.Succeeded {
			if u.committed != nil {
				*u.committed = committedAt
			}
			if u.fence != nil {
				s.applied("update", u.key, u.fence, committedAt)
			}
			if next == zero {
				return zero, nil
			}
			next.GetMeta().ResourceVersion = committedAt
			return next, nil
		}

		if u.fence != nil {
			fk := resp.Responses[1].GetResponseRange().GetKvs()
			if len(fk) == 0 || fk[0].CreateRevision != u.fence.Revision {
				return zero, ErrFenced
			}
		}
		if u.intent != "" {
			intentSeen, intentUID = false, ""
			if kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				intentSeen, intentUID = true, string(kvs[0].Value)
			}
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			cur, raw, rev = zero, nil, 0
		} else {
			if cur, err = u.codec.decode(kvs[0]); err != nil {
				return zero, err
			}
			raw, rev = kvs[0].Value, kvs[0].ModRevision
		}
		if attempt >= immediateRetries {
			if err := backoff(ctx, attempt-immediateRetries); err != nil {
				return zero, err
			}
		}
	}
}

func backoff(ctx context.Context, n int) error {
	d := backoffBase << min(n, 6)
	d = min(d, backoffMax)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-t.C:
		return nil
	}
}

func ctxErr(ctx context.Context) error {
	return fmt.Errorf("gave up: %w", context.Cause(ctx))
}

// etcdErr classifies a failed etcd call: the caller's context ending is
// reported as such; anything else means etcd could not be reached or
// refused the request.
func etcdErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	return shoal.Unavailable("etcd: %v", err)
}
