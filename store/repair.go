package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
)

// Repairs the leader runs on every resync. Each is one fenced Txn whose
// compares prove, at commit time, that the key it removes is stale; a
// concurrent legitimate write makes the compare fail and the key stays.

// Intents lists every deletion intent key. The coordinator completes the
// ones whose deleter died between intent and mark (CompleteIntent) and
// removes stale ones.
func (s *Store) Intents(ctx context.Context) ([]Attachment, error) {
	resp, err := s.c.Get(ctx, s.k.prefix+"/deleting/", clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	var out []Attachment
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), s.k.prefix+"/deleting/"), "/")
		if len(parts) != 2 {
			continue
		}
		out = append(out, Attachment{Workspace: parts[0], Sandbox: parts[1], UID: string(kv.Value)})
	}
	return out, nil
}

// CompleteIntent rolls a deletion intent forward: the sandbox with the
// intent's uid is marked DELETING. An intent whose uid matches no record
// (the record is gone, or has another uid) can never complete and would
// freeze the name forever, since every ordinary write compares the intent
// absent: it is removed, in one fenced Txn comparing the intent's value
// and the record's ModRevision as read. It reports whether it removed one.
func (s *Store) CompleteIntent(ctx context.Context, ws, name, uid string, fence Fence) (bool, error) {
	_, err := s.mark(ctx, ws, name, uid, nil)
	switch shoal.KindOf(err) {
	case shoal.KindNotFound, shoal.KindConflict:
	case shoal.KindDataLoss:
		return false, nil // a corrupt record: only deleting it frees the name
	default:
		return false, err
	}
	key, intent := s.k.sandbox(ws, name), s.k.intent(ws, name)
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return false, etcdErr(ctx, err)
	}
	var rev int64
	if len(resp.Kvs) > 0 {
		sb, err := sandboxCodec.decode(resp.Kvs[0])
		if err != nil || sb.GetMeta().GetUid() == uid {
			// Corrupt (only a delete frees it), or the record matches
			// after all (marked meanwhile): not stale.
			return false, nil
		}
		rev = resp.Kvs[0].ModRevision
	}
	tx, fencedOut, err := s.fencedTxn(ctx, "stale intent removed", intent, fence, []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(intent), "=", uid),
		clientv3.Compare(clientv3.ModRevision(key), "=", rev),
	}, []clientv3.Op{clientv3.OpDelete(intent)}, nil)
	if err != nil {
		return false, err
	}
	if fencedOut {
		return false, ErrFenced
	}
	if tx.Succeeded {
		s.log.Warn("removed stale deletion intent", "workspace", ws, "sandbox", name, "intent_uid", uid)
	}
	return tx.Succeeded, nil
}

// CollectAttachments removes attach/, release/ and placed/ keys that no
// sandbox holds: the sandbox record does not exist, has another uid, or
// (attach/ and release/) does not list the provider; and keys that are
// malformed. Such a key can only be left by a write around shoal (records
// and their keys change in one Txn), but it would block its provider's
// deletion, or a node slot, forever. Each removal is one fenced Txn that
// compares the key's value as read and the sandbox record as judged
// (absent, or at the ModRevision read). It returns how many keys it removed.
func (s *Store) CollectAttachments(ctx context.Context, fence Fence) (int, error) {
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.k.prefix+"/attach/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/release/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/placed/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	type held struct {
		kv       *mvccpb.KeyValue
		sbKey    string
		provider string // "" for placed/ keys
	}
	var keys []held
	for i, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			h := held{kv: kv}
			if i < 2 {
				// <prefix>/attach|release/<ws>/<provider>/<sandbox>
				parts := strings.Split(strings.TrimPrefix(string(kv.Key), s.k.prefix+"/"), "/")
				if len(parts) == 4 {
					h.sbKey, h.provider = s.k.sandbox(parts[1], parts[3]), parts[2]
				}
			} else {
				// <prefix>/placed/<node>/<slot>, value <ws>/<name>/<uid>
				if parts := strings.Split(string(kv.Value), "/"); len(parts) == 3 {
					h.sbKey = s.k.sandbox(parts[0], parts[1])
				}
			}
			keys = append(keys, h)
		}
	}
	// The records those keys point at, read in batches under etcd's op
	// limit.
	records := map[string]*mvccpb.KeyValue{}
	var want []string
	for _, h := range keys {
		if h.sbKey != "" {
			if _, seen := records[h.sbKey]; !seen {
				records[h.sbKey] = nil
				want = append(want, h.sbKey)
			}
		}
	}
	for len(want) > 0 {
		n := min(len(want), 100)
		ops := make([]clientv3.Op, n)
		for i, k := range want[:n] {
			ops[i] = clientv3.OpGet(k)
		}
		r, err := s.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return 0, etcdErr(ctx, err)
		}
		for i, k := range want[:n] {
			if kvs := r.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
				records[k] = kvs[0]
			}
		}
		want = want[n:]
	}
	removed := 0
	for _, h := range keys {
		rec := records[h.sbKey]
		guard := clientv3.Compare(clientv3.CreateRevision(h.sbKey), "=", 0)
		switch {
		case h.sbKey == "":
			// Malformed: no sandbox could ever hold it.
			guard = clientv3.Compare(clientv3.Value(string(h.kv.Key)), "=", string(h.kv.Value))
		case rec == nil:
			// The record is gone.
		default:
			sb, err := sandboxCodec.decode(rec)
			if err != nil {
				continue // corrupt: deleting the record removes its keys
			}
			uid := string(h.kv.Value)
			if h.provider == "" {
				uid = strings.SplitN(string(h.kv.Value), "/", 3)[2] // ws/name/uid
			}
			if sb.GetMeta().GetUid() == uid && (h.provider == "" || slices.Contains(sb.GetSpec().GetProviders(), h.provider)) {
				continue // held
			}
			guard = clientv3.Compare(clientv3.ModRevision(h.sbKey), "=", rec.ModRevision)
		}
		tx, fencedOut, err := s.fencedTxn(ctx, "stray key removed", string(h.kv.Key), fence, []clientv3.Cmp{guard,
			clientv3.Compare(clientv3.Value(string(h.kv.Key)), "=", string(h.kv.Value)),
		}, []clientv3.Op{clientv3.OpDelete(string(h.kv.Key))}, nil)
		if err != nil {
			return removed, err
		}
		if fencedOut {
			return removed, ErrFenced
		}
		if tx.Succeeded {
			removed++
			s.log.Warn("removed a key no sandbox holds", "key", fmt.Sprintf("%q", h.kv.Key))
		}
	}
	return removed, nil
}
