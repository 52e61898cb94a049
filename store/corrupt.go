package store

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Corrupt records. A value that does not decode (written around shoal, or
// damaged) must not stall anything: lists and watches skip it (list.go,
// watch.go), a get names it (KindDataLoss), and a delete removes it at
// once, with the keys that hang off it. Its container, if it ever had one,
// has no record left and is reaped by its node's orphan reaper.

// removeCorruptSandbox deletes a corrupt sandbox record, its deletion
// intent and every attachment key of its name, in one Txn that compares
// the record's ModRevision as read (a concurrent repair wins). It returns
// a stub of the record, marked DELETING at the revision just before the
// removal, so that a wait from there sees the record go.
func (s *Store) removeCorruptSandbox(ctx context.Context, ws, name string, kv *mvccpb.KeyValue, pre Preconditions) (*shoalv1.Sandbox, error) {
	if pre.UID != "" {
		return nil, shoal.FailedPrecondition("sandbox %q is corrupt, so its uid cannot be checked; delete it without a uid precondition", name)
	}
	if pre.ResourceVersion != 0 && pre.ResourceVersion != kv.ModRevision {
		return nil, shoal.Conflict("precondition failed: sandbox %q is at resource_version %d, not %d", name, kv.ModRevision, pre.ResourceVersion)
	}
	ops := []clientv3.Op{clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(s.k.intent(ws, name)), clientv3.OpDelete(s.k.torndown(ws, name))}
	held, err := s.attachmentsOf(ctx, ws, name)
	if err != nil {
		return nil, err
	}
	for _, k := range held {
		ops = append(ops, clientv3.OpDelete(k))
	}
	resp, err := s.txn(ctx, "remove corrupt sandbox", string(kv.Key), []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}, ops, nil)
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, errRetry
	}
	s.log.Warn("removed corrupt sandbox record", "key", string(kv.Key), "revision", kv.ModRevision, "attachment_keys", len(held))
	sb := sandboxCodec.stub(string(kv.Key), resp.Header.Revision-1)
	sb.Meta.DeletionTimestamp = ts(s.now())
	sb.Status = &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_DELETING, Message: "corrupt record removed"}
	return sb, nil
}

// errRetry means the record changed under a repair: read it again.
var errRetry = shoal.Conflict("record changed; retry")

// attachmentsOf returns the attach/ and release/ keys held by a sandbox
// name in a workspace.
func (s *Store) attachmentsOf(ctx context.Context, ws, name string) ([]string, error) {
	var out []string
	for _, p := range []string{s.k.prefix + "/attach/" + ws + "/", s.k.prefix + "/release/" + ws + "/"} {
		resp, err := s.c.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, etcdErr(ctx, err)
		}
		for _, kv := range resp.Kvs {
			if lastSegment(string(kv.Key)) == name {
				out = append(out, string(kv.Key))
			}
		}
	}
	return out, nil
}

// removeCorruptProvider deletes a corrupt provider record unless a live
// sandbox is attached to it (the same rule as DeleteProvider: one Txn that
// compares no key under its attach/ prefix, and its ModRevision as read).
// DELETING sandboxes that still hold it simply lose the provider early;
// their release/ keys go with their records.
func (s *Store) removeCorruptProvider(ctx context.Context, ws, name string, kv *mvccpb.KeyValue, pre Preconditions) error {
	if pre.UID != "" {
		return shoal.FailedPrecondition("provider %q is corrupt, so its uid cannot be checked; delete it without a uid precondition", name)
	}
	if pre.ResourceVersion != 0 && pre.ResourceVersion != kv.ModRevision {
		return shoal.Conflict("precondition failed: provider %q is at resource_version %d, not %d", name, kv.ModRevision, pre.ResourceVersion)
	}
	attachP := s.k.attachments(ws, name)
	resp, err := s.txn(ctx, "remove corrupt provider", string(kv.Key),
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision), noKeys(attachP)},
		[]clientv3.Op{clientv3.OpDelete(string(kv.Key))}, nil)
	if err != nil {
		return err
	}
	if resp.Succeeded {
		s.log.Warn("removed corrupt provider record", "key", string(kv.Key), "revision", kv.ModRevision)
		return nil
	}
	users, err := s.keyNames(ctx, attachP)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return shoal.FailedPrecondition("provider %q is attached to sandbox(es): %s; delete or detach them first", name, joinNames(users))
	}
	return errRetry
}
