package store

import (
	"context"
	"strings"

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
func (s *Store) CompleteIntent(ctx context.Context, ws, name, uid string, fence *Fence) (bool, error) {
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
	tx, err := s.c.Txn(ctx).If(fenced(fence,
		clientv3.Compare(clientv3.Value(intent), "=", uid),
		clientv3.Compare(clientv3.ModRevision(key), "=", rev),
	)...).Then(clientv3.OpDelete(intent)).Commit()
	if err != nil {
		return false, etcdErr(ctx, err)
	}
	if tx.Succeeded {
		s.log.Warn("removed stale deletion intent", "workspace", ws, "sandbox", name, "intent_uid", uid)
	}
	return tx.Succeeded, nil
}

// CollectAttachments removes attach/, release/ and placed/ keys whose
// sandbox record does not exist. Such a key can only be left by a write around
// shoal (records and their attachment keys are created and removed in one
// Txn), but it would block its provider's deletion forever. Each removal
// is one fenced Txn comparing the sandbox key absent and the attachment
// key's value as read. It returns how many keys it removed.
func (s *Store) CollectAttachments(ctx context.Context, fence *Fence) (int, error) {
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.k.allSandboxes(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.prefix+"/attach/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/release/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/placed/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	exists := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		exists[string(kv.Key)] = true
	}
	removed := 0
	for i, r := range resp.Responses[1:] {
		for _, kv := range r.GetResponseRange().GetKvs() {
			var sbKey string
			if i < 2 {
				// <prefix>/attach|release/<ws>/<provider>/<sandbox>
				parts := strings.Split(strings.TrimPrefix(string(kv.Key), s.k.prefix+"/"), "/")
				if len(parts) != 4 {
					continue
				}
				sbKey = s.k.sandbox(parts[1], parts[3])
			} else {
				// <prefix>/placed/<node>/<slot>, value <ws>/<name>/<uid>
				parts := strings.Split(string(kv.Value), "/")
				if len(parts) != 3 {
					continue
				}
				sbKey = s.k.sandbox(parts[0], parts[1])
			}
			if exists[sbKey] {
				continue
			}
			tx, err := s.c.Txn(ctx).If(fenced(fence,
				clientv3.Compare(clientv3.CreateRevision(sbKey), "=", 0),
				clientv3.Compare(clientv3.Value(string(kv.Key)), "=", string(kv.Value)),
			)...).Then(clientv3.OpDelete(string(kv.Key))).Commit()
			if err != nil {
				return removed, etcdErr(ctx, err)
			}
			if tx.Succeeded {
				removed++
				s.log.Warn("removed attachment key of a missing sandbox", "key", string(kv.Key))
			}
		}
	}
	return removed, nil
}

// fenced adds the fence's compare, if there is a fence (tests repair
// without one).
func fenced(f *Fence, cmps ...clientv3.Cmp) []clientv3.Cmp {
	if f != nil {
		cmps = append(cmps, f.cmp())
	}
	return cmps
}
