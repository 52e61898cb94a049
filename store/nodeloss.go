package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Losing a node, and forgetting one: the lost/ and forget/ keys (doc.go:
// Key layout).
//
// The leader writes lost/<id> (fenced) when the node's registry key is gone
// but its info key remains, and gives each of the node's sandboxes phase
// UNKNOWN with condition NodeLost. A deletion of such a sandbox completes
// once lost/<id> is older than the fence margin (deletion.go: ownerProof).
// RegisterNode deletes both keys in its own Txn: a node that is back is
// neither lost nor being forgotten, and every proof that relied on its
// absence fails its compare from then on.

// ConditionNodeLost is the sandbox condition the leader sets when the
// sandbox's node lost its lease.
const ConditionNodeLost = "NodeLost"

func lostValue(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseLost(v []byte) (time.Time, error) { return time.Parse(time.RFC3339Nano, string(v)) }

// MarkNodeLost records that a known node's registry key is gone, unless
// that is recorded already, in one fenced Txn comparing the registry key
// absent. It returns when the loss was recorded, or the zero time if the
// node is live again (or unknown).
func (s *Store) MarkNodeLost(ctx context.Context, id string, fence Fence) (time.Time, error) {
	key, info, lost := s.k.node(id), s.k.nodeInfo(id), s.k.lost(id)
	now := s.now()
	resp, fencedOut, err := s.fencedTxn(ctx, "node lost", lost, fence, []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(info), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(lost), "=", 0),
	}, []clientv3.Op{clientv3.OpPut(lost, lostValue(now))},
		[]clientv3.Op{clientv3.OpGet(lost), clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(info, clientv3.WithKeysOnly())})
	if err != nil {
		return time.Time{}, err
	}
	if resp.Succeeded {
		s.log.Warn("node lost its lease", "node", id)
		return now, nil
	}
	if fencedOut {
		return time.Time{}, ErrFenced
	}
	r := resp.Responses
	if len(r[1].GetResponseRange().GetKvs()) > 0 || len(r[2].GetResponseRange().GetKvs()) == 0 {
		return time.Time{}, nil
	}
	if kvs := r[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		since, err := parseLost(kvs[0].Value)
		if err != nil {
			return time.Time{}, shoal.DataLoss("node %q: loss record is unreadable: %v", id, err)
		}
		return since, nil
	}
	return time.Time{}, nil // recorded and gone meanwhile: the next pass sees it
}

// LostNodes returns every recorded loss, by node id.
func (s *Store) LostNodes(ctx context.Context) (map[string]time.Time, error) {
	resp, err := s.c.Get(ctx, s.k.prefix+"/lost/", clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	out := make(map[string]time.Time, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if t, err := parseLost(kv.Value); err == nil {
			out[lastSegment(string(kv.Key))] = t
		}
	}
	return out, nil
}

// MarkSandboxesUnknown gives every live sandbox of a lost node phase
// UNKNOWN and condition NodeLost. Each write is fenced and compares the
// node's registry key absent, so it never lands after the node is back.
// It returns how many sandboxes it changed.
func (s *Store) MarkSandboxesUnknown(ctx context.Context, id string, since time.Time, fence Fence) (int, error) {
	page, err := s.ListSandboxes(ctx, "", ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return NodeOf(sb) == id && sb.GetMeta().GetDeletionTimestamp() == nil &&
			sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_UNKNOWN
	})
	if err != nil {
		return 0, err
	}
	msg := fmt.Sprintf("node %s lost its lease at %s; the sandbox's state is unknown until the node is back",
		id, since.UTC().Format(time.RFC3339))
	nodeAbsent := clientv3.Compare(clientv3.CreateRevision(s.k.node(id)), "=", 0)
	// Each sandbox is its own fenced write, independent of the others:
	// they go side by side (a host of a hundred sandboxes took seconds one
	// after another on a busy machine).
	var n atomic.Int64
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, markWidth)
	var wg sync.WaitGroup
	for _, sb := range page.Items {
		sem <- struct{}{}
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			<-sem
			break // the fence is lost or etcd is gone: the rest would fail alike
		}
		wg.Go(func() {
			defer func() { <-sem }()
			marked, err := s.markUnknown(ctx, id, since, sb, msg, nodeAbsent, fence)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			if marked {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load()), firstErr
}

// markWidth bounds the UNKNOWN marks in flight at once.
const markWidth = 16

// markUnknown marks one sandbox of lost node id UNKNOWN. A sandbox with
// nothing to mark (being deleted, gone, replaced, unreadable, or its node
// back) is not marked and no error.
func (s *Store) markUnknown(ctx context.Context, id string, since time.Time, sb *shoalv1.Sandbox, msg string, nodeAbsent clientv3.Cmp, fence Fence) (bool, error) {
	ws, name, uid := sb.Meta.Workspace, sb.Meta.Name, sb.Meta.Uid
	attempts := 0
	marked, err := update(ctx, s, updateSpec[*shoalv1.Sandbox]{
		codec:  sandboxCodec,
		key:    s.k.sandbox(ws, name),
		intent: s.k.intent(ws, name),
		fence:  fence,
		pre:    Preconditions{UID: uid},
		mutate: func(cur *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
			if cur == nil || cur.GetMeta().GetDeletionTimestamp() != nil || NodeOf(cur) != id {
				return nil, errGone
			}
			if cur.Status == nil {
				cur.Status = &shoalv1.SandboxStatus{}
			}
			cur.Status.Phase = shoalv1.SandboxPhase_UNKNOWN
			cur.Status.Message = msg
			SetCondition(cur.Status, ConditionNodeLost, "True", "LeaseExpired", msg)
			return cur, nil
		},
		related: func(ctx context.Context, old, new *shoalv1.Sandbox, fromCopy bool) ([]clientv3.Cmp, []clientv3.Op, error) {
			// The first attempt goes on the compare alone (the node was
			// absent when its loss was recorded); after a failed compare
			// the node's key is read, so a node that is back ends the
			// loop rather than failing its compare for ever.
			attempts++
			if attempts > 1 {
				resp, err := s.c.Get(ctx, s.k.node(id), clientv3.WithKeysOnly())
				if err != nil {
					return nil, nil, etcdErr(ctx, err)
				}
				if len(resp.Kvs) > 0 {
					return nil, nil, errGone
				}
			}
			cmps, ops, err := s.sandboxRelated(ctx, old, new, fromCopy)
			return append(cmps, nodeAbsent), ops, err
		},
	})
	switch {
	case err == nil:
		s.recordNodeLost(marked, id, since, msg)
		return true, nil
	case err == errGone:
	case shoal.KindOf(err) == shoal.KindFailedPrecondition, shoal.KindOf(err) == shoal.KindNotFound,
		shoal.KindOf(err) == shoal.KindConflict, shoal.KindOf(err) == shoal.KindDataLoss:
		// being deleted, gone, replaced or unreadable: nothing to mark
	default:
		return false, err
	}
	return false, nil
}

// SetCondition sets a condition, moving its transition time only when its
// status changes.
func SetCondition(st *shoalv1.SandboxStatus, typ, status, reason, msg string) {
	for _, c := range st.Conditions {
		if c.Type == typ {
			if c.Status != status {
				c.LastTransitionTime = timestamppb.Now()
			}
			c.Status, c.Reason, c.Message = status, reason, msg
			return
		}
	}
	st.Conditions = append(st.Conditions, &shoalv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: timestamppb.Now()})
}

// ForgetNode starts forgetting a NotReady node (`shoal node remove`): it
// records the request, comparing the node's registry key absent. The caller
// then deletes the node's sandboxes; the leader removes the node's keys
// once none is left (CompleteForget). A Ready node is refused.
//
// A registry key (nodes/<id>) that does not decode is no node's
// registration (a node writes its own, and cannot register over one it
// cannot read): it is deleted first, in a Txn comparing its ModRevision
// as read. A corrupt info key (nodeinfo/<id>) goes the way of any NotReady
// node's: its sandboxes may have containers, so it is forgotten once none
// names the node.
func (s *Store) ForgetNode(ctx context.Context, id string) error {
	key, info := s.k.node(id), s.k.nodeInfo(id)
	removed, err := s.removeCorruptRegistration(ctx, id)
	if err != nil {
		return err
	}
	resp, err := s.txn(ctx, "forget node", s.k.forget(id), []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(info), ">", 0),
	}, []clientv3.Op{clientv3.OpPut(s.k.forget(id), lostValue(s.now()))}, []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())})
	if err != nil {
		return err
	}
	if resp.Succeeded {
		return nil
	}
	if len(resp.Responses[0].GetResponseRange().GetKvs()) > 0 {
		return shoal.FailedPrecondition("node %q is Ready: only a NotReady node can be removed: stop it first (`shoal node drain %s --delete` moves its sandboxes off before that)", id, id)
	}
	if removed {
		return nil // the corrupt registry key was all there was
	}
	return shoal.NotFound("node %q not found; `shoal node list` shows the known nodes", id)
}

// removeCorruptRegistration deletes the node's registry key if it does not
// decode, comparing its ModRevision as read (a registration that replaced
// it meanwhile is kept). It reports whether it deleted one.
func (s *Store) removeCorruptRegistration(ctx context.Context, id string) (bool, error) {
	key := s.k.node(id)
	for {
		resp, err := s.c.Get(ctx, key)
		if err != nil {
			return false, etcdErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return false, nil
		}
		kv := resp.Kvs[0]
		if _, err := decodeNode(kv); err == nil {
			return false, nil
		}
		tx, err := s.txn(ctx, "remove corrupt registration", key, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil)
		if err != nil {
			return false, err
		}
		if tx.Succeeded {
			s.log.Warn("removed corrupt node registration", "key", key, "revision", kv.ModRevision)
			return true, nil
		}
	}
}

// Forgetting returns the ids of the nodes `shoal node remove` was asked to
// forget.
func (s *Store) Forgetting(ctx context.Context) ([]string, error) {
	return s.keyNames(ctx, s.k.prefix+"/forget/")
}

// CompleteForget removes a node being forgotten from the registry once no
// sandbox names it: one fenced Txn deletes its info, cordon, loss and
// forget keys, comparing its registry key absent and its info key as read
// (a node that registered again meanwhile is not forgotten). It reports
// whether the node is gone and, if not, how many sandboxes still name it.
func (s *Store) CompleteForget(ctx context.Context, id string, fence Fence) (bool, int, error) {
	info := s.k.nodeInfo(id)
	resp, err := s.c.Get(ctx, info, clientv3.WithKeysOnly())
	if err != nil {
		return false, 0, etcdErr(ctx, err)
	}
	var infoRev int64
	if len(resp.Kvs) > 0 {
		infoRev = resp.Kvs[0].ModRevision
	}
	page, err := s.ListSandboxes(ctx, "", ListOptions{}, func(sb *shoalv1.Sandbox) bool { return NodeOf(sb) == id })
	if err != nil {
		return false, 0, err
	}
	if n := len(page.Items); n > 0 {
		return false, n, nil
	}
	tx, fencedOut, err := s.fencedTxn(ctx, "node forgotten", info, fence, []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.k.node(id)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(info), "=", infoRev),
		clientv3.Compare(clientv3.CreateRevision(s.k.forget(id)), ">", 0),
	}, []clientv3.Op{
		clientv3.OpDelete(info), clientv3.OpDelete(s.k.cordon(id)), clientv3.OpDelete(s.k.lost(id)),
		clientv3.OpDelete(s.k.forget(id)), clientv3.OpDelete(s.k.placedPrefix(id), clientv3.WithPrefix()),
	}, nil)
	if err != nil {
		return false, 0, err
	}
	if fencedOut {
		return false, 0, ErrFenced
	}
	if tx.Succeeded {
		s.log.Info("node forgotten", "node", id)
	}
	return tx.Succeeded, 0, nil
}
