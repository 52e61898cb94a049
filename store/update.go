package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"shoal"
	"shoal/internal/backoff"
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
const immediateRetries = 3

// conflictBackoff is the wait before retry n after the immediate ones:
// 1ms doubling to 50ms, each drawn uniformly from its upper half
// ([d/2, d]). The Policy's jitter is symmetric, so it is centred on 3/4
// of that: 0.75·d ± 1/3 is exactly [d/2, d].
var conflictBackoff = backoff.Policy{
	Initial: 750 * time.Microsecond,
	Max:     37500 * time.Microsecond,
	Jitter:  1.0 / 3,
}

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

// updateLoop is update's loop: each attempt reads (or takes the state the
// last one's Else branch returned), mutates, and sends one CAS Txn; a
// conflict starts the next attempt from the fresh state.
func updateLoop[T object](ctx context.Context, s *Store, u updateSpec[T], st *updateStats) (T, error) {
	var zero T
	a := &updater[T]{ctx: ctx, s: s, u: u, st: st}
	if err := a.begin(); err != nil {
		return zero, err
	}
	for n := 0; ; n++ {
		if err := a.deletionPending(); err != nil {
			return zero, err
		}
		at, outcome := a.build(n)
		if outcome != nil {
			// Nothing to write: from cached state, read and try again.
			retry, err := a.settle()
			switch {
			case err != nil:
				return zero, err
			case retry:
				continue
			case outcome == errNoChange:
				return a.cur, nil
			}
			return zero, outcome
		}
		resp, committedAt, err := a.send(at)
		if err != nil {
			return zero, err
		}
		if resp.Succeeded {
			return a.won(at, committedAt), nil
		}
		if err := a.conflict(resp); err != nil {
			return zero, err
		}
		if n >= immediateRetries {
			if backoff.Sleep(ctx, conflictBackoff.Delay(n-immediateRetries)) != nil {
				return zero, ctxErr(ctx)
			}
		}
	}
}

// errNoChange is build's outcome when the mutation writes nothing: the
// update succeeds with the current state.
var errNoChange = errors.New("no change")

// updater is one update between its attempts: the state the next attempt
// starts from (cur, raw, rev: the zero T, nil, 0 for an absent key) and
// where it came from.
type updater[T object] struct {
	ctx context.Context
	s   *Store
	u   updateSpec[T]
	st  *updateStats

	cur T
	raw []byte
	rev int64
	// fromCache: the state is the watch cache's (or this node's own last
	// write), not yet confirmed by etcd. Only a Txn may act on it (its
	// compares make a stale start a conflict); any other outcome, an
	// error or a no-op, is decided again from a fresh read (settle).
	fromCache bool
	// The deletion intent (u.intent) as last read.
	intentSeen bool
	intentUID  string
}

// begin takes the state to start from: the caller's, the cache's, or a
// read.
func (a *updater[T]) begin() error {
	u := &a.u
	if u.start == nil {
		if k := kindOf(a.s, u.codec); k != nil {
			u.start, a.fromCache = k.startFor(u.key)
		}
	}
	if u.start != nil {
		a.cur, a.raw, a.rev = u.start.obj, u.start.raw, u.start.rev
	}
	// A deletion-protocol write (deleting) ignores the intent, so a start
	// given by its caller needs no read; an ordinary write must see whether
	// one exists (from the cache it assumes none: the Txn compares it).
	if u.start == nil || (u.intent != "" && !u.deleting && !a.fromCache) {
		return a.read()
	}
	return nil
}

// read reads the key, and the intent key if any, from etcd.
func (a *updater[T]) read() error {
	var zero T
	ops := []clientv3.Op{clientv3.OpGet(a.u.key)}
	if a.u.intent != "" {
		ops = append(ops, clientv3.OpGet(a.u.intent))
	}
	resp, err := a.s.c.Txn(a.ctx).Then(ops...).Commit()
	if err != nil {
		return etcdErr(a.ctx, err)
	}
	a.cur, a.raw, a.rev = zero, nil, 0
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if a.cur, err = a.u.codec.decode(kvs[0]); err != nil {
			return err
		}
		a.raw, a.rev = kvs[0].Value, kvs[0].ModRevision
	}
	a.intentSeen, a.intentUID = false, ""
	if a.u.intent != "" {
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			a.intentSeen, a.intentUID = true, string(kvs[0].Value)
		}
	}
	return nil
}

// settle ends an attempt that would write nothing. From cached state it
// reads etcd and says to try again (retry); otherwise the outcome stands.
func (a *updater[T]) settle() (retry bool, err error) {
	if !a.fromCache {
		return false, nil
	}
	a.fromCache = false
	return true, a.read()
}

// deletionPending turns an ordinary writer away once a deletion of the
// object is requested, after helping to complete its mark (u.help).
func (a *updater[T]) deletionPending() error {
	var zero T
	u := &a.u
	if !a.intentSeen || u.deleting || a.cur == zero {
		return nil
	}
	if u.help != nil && a.cur.GetMeta().GetDeletionTimestamp() == nil && a.cur.GetMeta().GetUid() == a.intentUID {
		if err := u.help(a.ctx, a.intentUID); err != nil && shoal.KindOf(err) != shoal.KindNotFound && shoal.KindOf(err) != shoal.KindConflict {
			return err
		}
	}
	return shoal.FailedPrecondition("%s %q is being deleted", u.codec.kind, lastSegment(u.key))
}

// apply checks the caller's preconditions against the current state and
// computes the next one (the zero T: delete) and its encoding. An outcome
// that writes nothing is returned as outcome: errNoChange, or the error
// that ends the update.
func (a *updater[T]) apply() (next T, val []byte, outcome error) {
	var zero T
	u := &a.u
	if a.cur == zero && u.pre.set() {
		return zero, nil, shoal.NotFound("%s %q not found", u.codec.kind, lastSegment(u.key))
	}
	if a.cur != zero {
		if err := u.pre.check(u.codec.kind, a.cur.GetMeta()); err != nil {
			return zero, nil, err
		}
	}
	var in T
	if a.cur != zero {
		in = clone(a.cur)
	}
	next, err := u.mutate(in)
	switch {
	case err != nil:
		return zero, nil, err
	case a.cur == zero && next == zero:
		return zero, nil, errNoChange
	case next == zero:
		return zero, nil, nil
	}
	if val, err = u.codec.encode(next); err != nil {
		return zero, nil, err
	}
	// A mutation that changes nothing writes nothing.
	if a.cur != zero && bytes.Equal(val, a.raw) {
		return zero, nil, errNoChange
	}
	return next, val, nil
}

// attempt is one attempt's write: the state it would leave (next, the
// zero T for a delete, and its encoding val) and its Txn, If(cmps)
// Then(then) Else(els).
type attempt[T object] struct {
	next   T
	val    []byte
	cmps   []clientv3.Cmp
	then   []clientv3.Op
	els    []clientv3.Op
	nested bool // els is a same-bytes Txn (below)
}

// build makes an attempt from the current state: apply, then its Txn
//
//	If(ModRevision(key) == read [, related compares] [, fence]
//	   [, caller's ModRevision] [, intent absent])
//	Then(Put or Delete [, related ops])
//	Else(Get key [, Get fence key] [, Get intent])
//
// After a conflict (n > 0) the Else branch retries the same writes
// guarded by the exact stored bytes instead: Else(Txn If(Value(key) ==
// bytes read, same compares) Then(same ops) Else(the gets above)).
//
// An outcome without a write (apply's, or related's error) is returned as
// outcome.
func (a *updater[T]) build(n int) (at attempt[T], outcome error) {
	var zero T
	u := &a.u
	next, val, outcome := a.apply()
	if outcome != nil {
		return at, outcome
	}
	var ops []clientv3.Op
	if next == zero {
		ops = append(ops, clientv3.OpDelete(u.key))
	} else {
		ops = append(ops, clientv3.OpPut(u.key, string(val)))
	}
	var extra []clientv3.Cmp
	if u.related != nil {
		rc, ro, err := u.related(a.ctx, a.cur, next, n == 0)
		if err != nil {
			return at, err
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
	if u.intent != "" && !u.deleting && a.cur != zero {
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
	guard := clientv3.Compare(clientv3.ModRevision(u.key), "=", a.rev)
	if chaosbreak.Is("skip-compare") && a.cur != zero {
		guard = clientv3.Compare(clientv3.Version(u.key), ">", 0)
	}
	at = attempt[T]{next: next, val: val, cmps: append([]clientv3.Cmp{guard}, extra...), then: ops, els: elseOps, nested: n > 0}
	if at.nested {
		sameBytes := guard // absent stays absent: nothing to fall back to
		if a.cur != zero {
			sameBytes = clientv3.Compare(clientv3.Value(u.key), "=", string(a.raw))
		}
		at.els = []clientv3.Op{clientv3.OpTxn(append([]clientv3.Cmp{sameBytes}, extra...), ops, elseOps)}
	}
	return at, nil
}

// send commits the attempt's Txn and counts it. resp is the branch that
// decided: the nested same-bytes Txn's, when the guard failed after a
// conflict. committedAt is the revision of the commit.
func (a *updater[T]) send(t attempt[T]) (resp *clientv3.TxnResponse, committedAt int64, err error) {
	resp, err = a.s.c.Txn(a.ctx).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
	if err != nil {
		return nil, 0, etcdErr(a.ctx, err)
	}
	committedAt = resp.Header.Revision
	firstWon := resp.Succeeded
	if !resp.Succeeded && t.nested {
		resp = (*clientv3.TxnResponse)(resp.Responses[0].GetResponseTxn())
	}
	a.s.metrics.UpdateAttempt(a.u.codec.kind, !resp.Succeeded, !firstWon && resp.Succeeded)
	a.st.attempts++
	if !resp.Succeeded {
		a.st.conflicts++
	} else if !firstWon {
		a.st.identical++
	}
	return resp, committedAt, nil
}

// won records a committed attempt (the caller's revision, the cache, the
// fenced-write log) and returns the object as written.
func (a *updater[T]) won(at attempt[T], committedAt int64) T {
	var zero T
	u, next := &a.u, at.next
	if u.committed != nil {
		*u.committed = committedAt
	}
	if k := kindOf(a.s, u.codec); k != nil {
		k.wrote(u.key, next, at.val, committedAt)
	}
	if u.fence != nil {
		a.s.applied("update", u.key, u.fence, committedAt)
	}
	if next == zero {
		return zero
	}
	next.GetMeta().ResourceVersion = committedAt
	return next
}

// conflict takes the refused attempt's Else branch as the fresh state for
// the next one, unless the refusal was the fence's (ErrFenced).
func (a *updater[T]) conflict(resp *clientv3.TxnResponse) error {
	var zero T
	u := &a.u
	a.fromCache = false // the Else branch read the state
	if u.fence != nil {
		if fenceLost(u.fence, resp.Responses[1].GetResponseRange().GetKvs()) {
			a.s.metrics.FencedRejection()
			a.st.fenced = true
			return ErrFenced
		}
	}
	if u.intent != "" {
		a.intentSeen, a.intentUID = false, ""
		if kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			a.intentSeen, a.intentUID = true, string(kvs[0].Value)
		}
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		a.cur, a.raw, a.rev = zero, nil, 0
		return nil
	}
	cur, err := a.u.codec.decode(kvs[0])
	if err != nil {
		return err
	}
	a.cur, a.raw, a.rev = cur, kvs[0].Value, kvs[0].ModRevision
	return nil
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
