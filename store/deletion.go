package store

// The deletion protocol, top to bottom.
//
// Sandbox:
//
//  1. Intent. DeleteSandbox → MarkSandboxDeleting: put the deletion intent
//     key (deleting/<ws>/<name>), which ordinary writers compare absent, so
//     from that moment they stop competing; then, through the update loop,
//     set meta.deletion_timestamp and phase DELETING, and in the same Txn
//     move every attach/ key of the sandbox to release/. This succeeds
//     unless the caller's own precondition (uid, resource_version) fails.
//     Marking twice is a no-op. The intent is durable: it is in etcd before
//     the call returns, and a DELETING sandbox is frozen.
//  2. Teardown, by the OWNER: the agent of the sandbox's node (NodeOf)
//     removes the container (idempotent: "already gone" is success), then
//     RecordTeardown puts torndown/<ws>/<name> = uid, comparing the intent
//     key's value, so the record can only name the deletion in progress.
//     No other node touches the container.
//  3. RemoveSandbox, by the coordinator under the leader lease: ONE fenced
//     Txn deletes the sandbox record, its intent key, its torndown record,
//     its node slot and all its attach/ and release/ keys. It compares the
//     record's ModRevision, the uid seen at step 1 (so a same-name
//     replacement is never touched), the leader key's create revision (so
//     a deposed leader cannot write), and the owner's proof (ownerProof):
//       - the torndown record holds this uid; or
//       - the owner is lost: its registry key is absent, and the leader
//         recorded the loss (lost/<node>) at least the fence margin ago;
//         by then a node cut off from etcd has frozen its containers
//         (agent.freeze), because it cannot renew its lease either; or
//       - the owner never registered (no nodeinfo/<node>), or the sandbox
//         has no node: no container can exist.
//     Otherwise RemoveSandbox returns *OwnerPending and writes nothing.
//     A restart re-runs 2 and 3 for every DELETING record: the protocol
//     resumes wherever it stopped. A lost node that comes back removes the
//     containers of sandboxes that are gone before it unfreezes the rest.
//
// Provider:
//
//  1. DeleteProvider: one Txn through the update loop that compares "no key
//     under attach/<ws>/<provider>/" (no live sandbox uses it). If release/
//     keys exist too (DELETING sandboxes still hold it), the provider is
//     marked terminating instead of deleted: it takes no new attachments,
//     since every attach compares the provider's ModRevision and refuses a
//     terminating provider.
//  2. FinalizeProvider, by the coordinator under the lease: one fenced Txn
//     deletes a terminating provider once attach/ and release/ are both empty.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/chaosbreak"
)

// MarkSandboxDeleting records the durable intent to delete a sandbox. It is
// idempotent and fails only when pre does not hold or the sandbox is absent.
//
// It takes two Txns, neither of which an ordinary writer can starve:
//
//  1. Put the intent key, comparing only the sandbox key's CreateRevision
//     (the incarnation; label and status writes do not change it) and, if
//     the caller gave one, its resource_version.
//  2. From then on every ordinary write of the sandbox fails its
//     "intent key absent" compare, so the update loop that sets
//     deletion_timestamp and phase DELETING (and moves attach/ keys to
//     release/) competes with nobody.
func (s *Store) MarkSandboxDeleting(ctx context.Context, ws, name string, pre Preconditions) (*shoalv1.Sandbox, error) {
	key, intent := s.k.sandbox(ws, name), s.k.intent(ws, name)
	resp, err := s.c.Get(ctx, key)
	for {
		if err != nil {
			return nil, etcdErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return nil, shoal.NotFound("sandbox %q not found", name)
		}
		kv := resp.Kvs[0]
		cur, derr := sandboxCodec.decode(kv)
		if shoal.KindOf(derr) == shoal.KindDataLoss {
			sb, rerr := s.removeCorruptSandbox(ctx, ws, name, kv, pre)
			if rerr != errRetry {
				return sb, rerr
			}
			resp, err = s.c.Get(ctx, key) // changed under the repair: read again
			continue
		}
		if derr != nil {
			return nil, derr
		}
		if err := pre.check("sandbox", cur.Meta); err != nil {
			return nil, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision)}
		if pre.ResourceVersion != 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", pre.ResourceVersion))
		}
		// Then reads the record back at the intent's revision: from here on
		// only the deletion protocol writes it, so the mark can start from
		// this copy without another read.
		tx, terr := s.txn(ctx, "delete intent", intent, cmps,
			[]clientv3.Op{clientv3.OpPut(intent, cur.Meta.Uid), clientv3.OpGet(key)}, []clientv3.Op{clientv3.OpGet(key)})
		if terr != nil {
			return nil, terr
		}
		if tx.Succeeded {
			var start *cached[*shoalv1.Sandbox]
			if kvs := tx.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				if obj, err := sandboxCodec.decode(kvs[0]); err == nil {
					start = &cached[*shoalv1.Sandbox]{obj: obj, raw: kvs[0].Value, rev: kvs[0].ModRevision}
				}
			}
			marked, err := s.mark(ctx, ws, name, cur.Meta.Uid, start)
			switch shoal.KindOf(err) {
			case shoal.KindNotFound, shoal.KindConflict:
				// A writer that met our intent marked the record for us and
				// teardown has already removed it (or a replacement took
				// the name): the deletion we asked for is done. Report the
				// record as last seen, marked, at its old revision, so a
				// wait from there sees it go.
				cur.Meta.DeletionTimestamp = ts(s.now())
				if cur.Status == nil {
					cur.Status = &shoalv1.SandboxStatus{}
				}
				cur.Status.Phase = shoalv1.SandboxPhase_DELETING
				return cur, nil
			}
			return marked, err
		}
		resp = (*clientv3.GetResponse)(tx.Responses[0].GetResponseRange())
	}
}

// mark is step 1's second half: set deletion_timestamp and phase DELETING
// on the record with the intent's uid, and move its attachments to
// release/. The deleter runs it; so does any writer that finds an intent
// not yet marked (helping), and the coordinator's resync, so a crash between
// the intent and the mark cannot leave a deletion half done.
func (s *Store) mark(ctx context.Context, ws, name, uid string, start *cached[*shoalv1.Sandbox]) (*shoalv1.Sandbox, error) {
	return s.updateSandbox(ctx, ws, name, Preconditions{UID: uid}, true, start, func(sb *shoalv1.Sandbox) error {
		if sb.Meta.DeletionTimestamp != nil {
			return nil
		}
		sb.Meta.DeletionTimestamp = ts(s.now())
		if sb.Status == nil {
			sb.Status = &shoalv1.SandboxStatus{}
		}
		sb.Status.Phase = shoalv1.SandboxPhase_DELETING
		sb.Status.Message = "deletion requested"
		return nil
	})
}

// RecordTeardown is the owner's half of step 2: the agent of the node
// that ran the sandbox's container has removed it. The record is written
// only while the deletion of exactly this uid is pending; for a sandbox
// already removed nothing is written and nil is returned.
func (s *Store) RecordTeardown(ctx context.Context, ws, name, uid string) error {
	_, err := s.txn(ctx, "record teardown", s.k.torndown(ws, name), []clientv3.Cmp{clientv3.Compare(clientv3.Value(s.k.intent(ws, name)), "=", uid)},
		[]clientv3.Op{clientv3.OpPut(s.k.torndown(ws, name), uid)}, nil)
	return err
}

// OwnerPending is RemoveSandbox's answer while step 2 is not done: the
// owning node is live and has not recorded its teardown, or it is lost and
// its fence time has not passed (Wait is what remains of it, or 0 while the
// leader has not yet recorded the loss).
type OwnerPending struct {
	Node string
	Lost bool
	Wait time.Duration
}

func (e *OwnerPending) Error() string {
	if !e.Lost {
		return fmt.Sprintf("waiting for node %q to remove the container", e.Node)
	}
	return fmt.Sprintf("node %q is lost: waiting %s for its fence time", e.Node, e.Wait.Round(time.Millisecond))
}

// RemoveSandbox is the last step of teardown: one fenced Txn that deletes
// the record of the sandbox with the given uid, its deletion intent, its
// teardown record, its node slot and every attachment key it holds, once
// the owner's step is proven (see the top of this file; margin is the fence
// margin after a lost node's recorded loss). A record that is already gone
// (or replaced) is success, with revision 0; otherwise the revision is that
// of the removing Txn. Without the proof it returns *OwnerPending.
func (s *Store) RemoveSandbox(ctx context.Context, ws, name, uid string, fence Fence, margin time.Duration) (int64, error) {
	var rev int64
	var removed *shoalv1.Sandbox
	var pr proof
	_, err := update(ctx, s, updateSpec[*shoalv1.Sandbox]{
		committed: &rev,
		codec:     sandboxCodec,
		key:       s.k.sandbox(ws, name),
		intent:    s.k.intent(ws, name),
		deleting:  true,
		fence:     fence,
		mutate: func(cur *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
			if cur == nil || cur.GetMeta().GetUid() != uid {
				return cur, errGone
			}
			if cur.GetMeta().GetDeletionTimestamp() == nil {
				return nil, shoal.FailedPrecondition("sandbox %q is not being deleted", name)
			}
			return nil, nil
		},
		related: func(ctx context.Context, old, new *shoalv1.Sandbox, fromCopy bool) ([]clientv3.Cmp, []clientv3.Op, error) {
			proof, err := s.ownerProof(ctx, old, margin, &pr)
			if err != nil {
				return nil, nil, err
			}
			removed = old
			cmps, ops, err := s.sandboxRelated(ctx, old, new, fromCopy)
			return append(cmps, proof...), ops, err
		},
	})
	if err == errGone {
		return 0, nil
	}
	if err == nil && rev != 0 {
		s.recordRemoved(removed, pr, margin)
	}
	return rev, err
}

// ownerProof returns the compares that prove, at commit time, that the
// container of sb is gone or its node fenced (step 3 above), or
// *OwnerPending; *pr says which proof it is.
func (s *Store) ownerProof(ctx context.Context, sb *shoalv1.Sandbox, margin time.Duration, pr *proof) ([]clientv3.Cmp, error) {
	m := sb.GetMeta()
	td := s.k.torndown(m.GetWorkspace(), m.GetName())
	owner := NodeOf(sb)
	ops := []clientv3.Op{clientv3.OpGet(td)}
	if owner != "" {
		ops = append(ops, clientv3.OpGet(s.k.node(owner), clientv3.WithKeysOnly()),
			clientv3.OpGet(s.k.nodeInfo(owner), clientv3.WithKeysOnly()), clientv3.OpGet(s.k.lost(owner)))
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	r := resp.Responses
	*pr = proof{node: owner}
	if kvs := r[0].GetResponseRange().GetKvs(); len(kvs) > 0 && string(kvs[0].Value) == m.GetUid() {
		pr.kind = proofTornDown
		return []clientv3.Cmp{clientv3.Compare(clientv3.Value(td), "=", m.GetUid())}, nil
	}
	pr.kind = proofNoContainer
	if owner == "" {
		return nil, nil // never placed: no container was ever made
	}
	live, info, lost := r[1].GetResponseRange().GetKvs(), r[2].GetResponseRange().GetKvs(), r[3].GetResponseRange().GetKvs()
	nodeAbsent := clientv3.Compare(clientv3.CreateRevision(s.k.node(owner)), "=", 0)
	switch {
	case len(live) > 0:
		return nil, &OwnerPending{Node: owner}
	case len(info) == 0:
		// A node the cluster never knew (or has forgotten, which it does
		// only once no sandbox names it) ran no container.
		return []clientv3.Cmp{nodeAbsent, clientv3.Compare(clientv3.CreateRevision(s.k.nodeInfo(owner)), "=", 0)}, nil
	case len(lost) == 0:
		return nil, &OwnerPending{Node: owner, Lost: true}
	}
	since, err := parseLost(lost[0].Value)
	if err != nil {
		return nil, shoal.DataLoss("node %q: loss record %q is unreadable: %v", owner, lost[0].Key, err)
	}
	if wait := since.Add(margin).Sub(s.now()); wait > 0 {
		return nil, &OwnerPending{Node: owner, Lost: true, Wait: wait}
	}
	pr.kind, pr.lost = proofFenced, since
	return []clientv3.Cmp{nodeAbsent, clientv3.Compare(clientv3.ModRevision(s.k.lost(owner)), "=", lost[0].ModRevision)}, nil
}

var errGone = shoal.NotFound("already removed")

// DeleteProvider deletes a provider no live sandbox uses. If only DELETING
// sandboxes still hold it, it is marked terminating and deleted=false; the
// coordinator removes it when the last one is gone. A corrupt provider
// record is removed at once under the same rule (corrupt.go).
func (s *Store) DeleteProvider(ctx context.Context, ws, name string, pre Preconditions) (deleted bool, p *shoalv1.Provider, err error) {
	for {
		deleted, p, err = s.deleteProvider(ctx, ws, name, pre)
		if shoal.KindOf(err) != shoal.KindDataLoss {
			return deleted, p, err
		}
		resp, gerr := s.c.Get(ctx, s.k.provider(ws, name))
		if gerr != nil {
			return false, nil, etcdErr(ctx, gerr)
		}
		if len(resp.Kvs) == 0 {
			continue // removed meanwhile: the next round reports NotFound
		}
		if _, derr := providerCodec.decode(resp.Kvs[0]); derr == nil {
			continue // repaired meanwhile: delete it the ordinary way
		}
		switch err := s.removeCorruptProvider(ctx, ws, name, resp.Kvs[0], pre); err {
		case nil:
			return true, nil, nil
		case errRetry:
		default:
			return false, nil, err
		}
	}
}

func (s *Store) deleteProvider(ctx context.Context, ws, name string, pre Preconditions) (deleted bool, p *shoalv1.Provider, err error) {
	attachP, releaseP := s.k.attachments(ws, name), s.k.releases(ws, name)
	p, err = update(ctx, s, updateSpec[*shoalv1.Provider]{
		codec: providerCodec,
		key:   s.k.provider(ws, name),
		pre:   pre,
		mutate: func(cur *shoalv1.Provider) (*shoalv1.Provider, error) {
			if cur == nil {
				return nil, shoal.NotFound("provider %q not found", name)
			}
			users, err := s.keyNames(ctx, attachP)
			if err != nil {
				return nil, err
			}
			if len(users) > 0 {
				return nil, shoal.FailedPrecondition("provider %q is attached to sandbox(es): %s; delete or detach them first",
					name, joinNames(users))
			}
			holders, err := s.keyNames(ctx, releaseP)
			if err != nil {
				return nil, err
			}
			if len(holders) == 0 {
				return nil, nil
			}
			if cur.Meta.DeletionTimestamp == nil {
				cur.Meta.DeletionTimestamp = ts(s.now())
			}
			return cur, nil
		},
		related: func(_ context.Context, _, new *shoalv1.Provider, _ bool) ([]clientv3.Cmp, []clientv3.Op, error) {
			if chaosbreak.Is("check-then-act") {
				return nil, nil, nil
			}
			cmps := []clientv3.Cmp{noKeys(attachP)}
			if new == nil {
				cmps = append(cmps, noKeys(releaseP))
			}
			return cmps, nil, nil
		},
	})
	if err != nil {
		return false, nil, err
	}
	return p == nil, p, nil
}

// FinalizeProvider deletes a terminating provider once no sandbox holds it.
// It reports whether the provider is gone.
func (s *Store) FinalizeProvider(ctx context.Context, ws, name string, fence Fence) (bool, int64, error) {
	attachP, releaseP := s.k.attachments(ws, name), s.k.releases(ws, name)
	var busy bool
	var rev int64
	_, err := update(ctx, s, updateSpec[*shoalv1.Provider]{
		committed: &rev,
		codec:     providerCodec,
		key:       s.k.provider(ws, name),
		fence:     fence,
		mutate: func(cur *shoalv1.Provider) (*shoalv1.Provider, error) {
			busy = false
			if cur == nil || cur.GetMeta().GetDeletionTimestamp() == nil {
				return cur, nil
			}
			n, err := s.countKeys(ctx, releaseP)
			if err != nil {
				return nil, err
			}
			m, err := s.countKeys(ctx, attachP)
			if err != nil {
				return nil, err
			}
			if n+m > 0 {
				busy = true
				return cur, nil
			}
			return nil, nil
		},
		related: func(context.Context, *shoalv1.Provider, *shoalv1.Provider, bool) ([]clientv3.Cmp, []clientv3.Op, error) {
			return []clientv3.Cmp{noKeys(attachP), noKeys(releaseP)}, nil, nil
		},
	})
	return err == nil && !busy && rev != 0, rev, err
}

// noKeys holds while no key exists under prefix: every key in the range
// must have create revision 0, which is vacuously true only for an empty
// range.
func noKeys(prefix string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithPrefix()
}

func joinNames(names []string) string { return strings.Join(names, ", ") }

func (s *Store) keyNames(ctx context.Context, prefix string) ([]string, error) {
	resp, err := s.c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		names = append(names, lastSegment(string(kv.Key)))
	}
	slices.Sort(names)
	return names, nil
}

func (s *Store) countKeys(ctx context.Context, prefix string) (int64, error) {
	resp, err := s.c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	return resp.Count, nil
}
