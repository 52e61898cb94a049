package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
// objects they point at). fromCopy allows it to read those objects from
// the watch cache (the first attempt only): what it compares makes a stale
// copy a conflict, and the attempts after a conflict read etcd, so a copy
// that lags cannot make the loop spin. A refusal it would base on the copy
// (an object not found) it must check with etcd first.
type relatedFunc[T object] func(ctx context.Context, old, new T, fromCopy bool) ([]clientv3.Cmp, []clientv3.Op, error)

type updateSpec[T object] struct {
	codec   codec[T]
	key     string
	pre     Preconditions
	fence   Fence
	mutate  mutateFunc[T]
	related relatedFunc[T]
	// start, when set, is the current state taken from a cache (possibly
	// shared with it: the loop never changes it); the loop then begins
	// with its Txn and reads only on conflict.
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
//     Else(Get key [, Get fence key]) on the first attempt; after a
//     conflict Else(Txn If(Value(key) == bytes read [, same compares])
//     Then(same ops) Else(Get key [, Get fence key]));
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
	ctx, span := s.tracer.Start(ctx, "store.update", trace.WithAttributes(
		attribute.String("shoal.kind", u.codec.kind), attribute.String("shoal.key", u.key)))
	var st updateStats
	obj, err := updateLoop(ctx, s, u, &st)
	span.SetAttributes(attribute.Int("shoal.update.attempts", st.attempts), attribute.Int("shoal.update.conflicts", st.conflicts),
		attribute.Int("shoal.update.identical_byte_commits", st.identical), attribute.Bool("shoal.update.fenced", st.fenced))
	if err != nil {
		span.SetStatus(codes.Error, "update failed")
		span.RecordError(errors.New(errorClass(err)))
	}
	span.End()
	return obj, err
}

// updateStats is what one update went through, for its span.
type updateStats struct {
	attempts, conflicts, identical int
	fenced                         bool
}

func updateLoop[T object](ctx context.Context, s *Store, u updateSpec[T], st *updateStats) (T, error) {
	var zero T
	cur, raw, rev := zero, []byte(nil), int64(0)
	// fromCache: the state is the watch cache's (or this node's own last
	// write), not yet confirmed by etcd. Only a Txn may act on it (its
	// compares make a stale start a conflict); any other outcome, an
	// error or a no-op, is decided again from a fresh read.
	fromCache := false
	if u.start == nil {
		if k := kindOf(s, u.codec); k != nil {
			u.start, fromCache = k.startFor(u.key)
		}
	}
	if u.start != nil {
		cur, raw, rev = u.start.obj, u.start.raw, u.start.rev
	}
	intentSeen, intentUID := false, ""
	read := func() error {
		ops := []clientv3.Op{clientv3.OpGet(u.key)}
		if u.intent != "" {
			ops = append(ops, clientv3.OpGet(u.intent))
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return etcdErr(ctx, err)
		}
		cur, raw, rev = zero, nil, 0
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if cur, err = u.codec.decode(kvs[0]); err != nil {
				return err
			}
			raw, rev = kvs[0].Value, kvs[0].ModRevision
		}
		intentSeen, intentUID = false, ""
		if u.intent != "" {
			if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				intentSeen, intentUID = true, string(kvs[0].Value)
			}
		}
		return nil
	}
	// A deletion-protocol write (deleting) ignores the intent, so a start
	// given by its caller needs no read; an ordinary write must see whether
	// one exists (from the cache it assumes none: the Txn compares it).
	if u.start == nil || (u.intent != "" && !u.deleting && !fromCache) {
		if err := read(); err != nil {
			return zero, err
		}
	}
	// decide ends the loop without a write: from cached state, it reads
	// and tries again instead (retry true).
	decide := func() (retry bool, err error) {
		if !fromCache {
			return false, nil
		}
		fromCache = false
		return true, read()
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
		var pending error // an outcome without a write, if it stands
		if cur == zero && u.pre.set() {
			pending = shoal.NotFound("%s %q not found", u.codec.kind, lastSegment(u.key))
		} else if cur != zero {
			pending = u.pre.check(u.codec.kind, cur.GetMeta())
		}
		var next T
		var val []byte
		noop := false
		if pending == nil {
			var in T
			if cur != zero {
				in = clone(cur)
			}
			next, pending = u.mutate(in)
		}
		if pending == nil {
			switch {
			case cur == zero && next == zero:
				noop = true
			case next != zero:
				val, pending = u.codec.encode(next)
				// A mutation that changes nothing writes nothing.
				noop = pending == nil && cur != zero && bytes.Equal(val, raw)
			}
		}
		if pending != nil || noop {
			retry, err := decide()
			switch {
			case err != nil:
				return zero, err
			case retry:
				continue
			case pending != nil:
				return zero, pending
			}
			return cur, nil
		}

		var ops []clientv3.Op
		if next == zero {
			ops = append(ops, clientv3.OpDelete(u.key))
		} else {
			ops = append(ops, clientv3.OpPut(u.key, string(val)))
		}
		var extra []clientv3.Cmp
		if u.related != nil {
			rc, ro, err := u.related(ctx, cur, next, attempt == 0)
			if err != nil {
				if retry, rerr := decide(); rerr != nil {
					return zero, rerr
				} else if retry {
					continue
				}
				return zero, err
			}
			extra = append(extra, rc...)
			ops = append(ops, ro...)
		}
		if u.fence != nil {
			extra = append(extra, fenceCmp(u.fence))
		}
		if u.pre.ResourceVersion != 0 {
			// The same-bytes fallback below must not commit over a
			// rewrite the caller's version predates.
			extra = append(extra, clientv3.Compare(clientv3.ModRevision(u.key), "=", u.pre.ResourceVersion))
		}
		if u.intent != "" && !u.deleting && cur != zero {
			extra = append(extra, clientv3.Compare(clientv3.CreateRevision(u.intent), "=", 0))
		}
		elseOps := []clientv3.Op{clientv3.OpGet(u.key)}
		if u.fence != nil {
			elseOps = append(elseOps, clientv3.OpGet(u.fence.Key()))
		}
		if u.intent != "" {
			elseOps = append(elseOps, clientv3.OpGet(u.intent))
		}

		// The guard is ModRevision(key) == rev. A write that bumped the
		// revision without changing a byte (a rewrite of the identical
		// value) does not change the state the mutation was computed
		// from, so after a conflict the Else branch retries the same
		// writes guarded by the exact stored bytes, in the same Txn.
		// Without it a tight loop of identical rewrites by another client
		// could starve the update. The first attempt, which has seen no
		// conflict yet, leaves it out: it would double the request (every
		// op twice) for a case that a plain Else and one more attempt
		// handle as well.
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
		nested := attempt > 0
		elseBranch := elseOps
		if nested {
			elseBranch = []clientv3.Op{clientv3.OpTxn(append([]clientv3.Cmp{sameBytes}, extra...), ops, elseOps)}
		}
		resp, err := s.c.Txn(ctx).
			If(append([]clientv3.Cmp{guard}, extra...)...).
			Then(ops...).
			Else(elseBranch...).
			Commit()
		if err != nil {
			return zero, etcdErr(ctx, err)
		}
		committedAt := resp.Header.Revision
		firstWon := resp.Succeeded
		if !resp.Succeeded && nested {
			resp = (*clientv3.TxnResponse)(resp.Responses[0].GetResponseTxn())
		}
		s.metrics.UpdateAttempt(u.codec.kind, !resp.Succeeded, !firstWon && resp.Succeeded)
		st.attempts++
		if !resp.Succeeded {
			st.conflicts++
		} else if !firstWon {
			st.identical++
		}
		if resp.Succeeded {
			if u.committed != nil {
				*u.committed = committedAt
			}
			if k := kindOf(s, u.codec); k != nil {
				k.wrote(u.key, next, val, committedAt)
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

		fromCache = false // the Else branch read the state
		if u.fence != nil {
			if fenceLost(u.fence, resp.Responses[1].GetResponseRange().GetKvs()) {
				s.metrics.FencedRejection()
				st.fenced = true
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

// errorClass names an update's failure for its span without its message
// (which may name objects, never values, but is not needed there).
func errorClass(err error) string {
	switch shoal.KindOf(err) {
	case shoal.KindNotFound:
		return "not found"
	case shoal.KindAlreadyExists:
		return "already exists"
	case shoal.KindFailedPrecondition, shoal.KindConflict:
		return "failed precondition"
	case shoal.KindInvalid:
		return "invalid"
	case shoal.KindUnavailable:
		return "unavailable"
	case shoal.KindDataLoss:
		return "data loss"
	}
	if errors.Is(err, ErrFenced) {
		return "fenced"
	}
	return "error"
}
