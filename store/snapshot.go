package store

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
)

// Attachment is one attachment key.
type Attachment struct {
	Workspace, Provider, Sandbox, UID string
	// Releasing is true for release/ keys (held by a DELETING sandbox).
	Releasing bool
}

// Snapshot is every sandbox, provider and attachment at one revision, for
// invariant checkers (the chaos suite) and debugging.
type Snapshot struct {
	Revision    int64
	Sandboxes   []*shoalv1.Sandbox
	Providers   []*shoalv1.Provider
	Attachments []Attachment
}

// Snapshot reads the whole keyspace in one Txn, so the parts are mutually
// consistent. Corrupt records are left out (and logged).
func (s *Store) Snapshot(ctx context.Context) (*Snapshot, error) {
	resp, err := s.txn(ctx, "snapshot", s.k.prefix+"/", nil, []clientv3.Op{
		clientv3.OpGet(s.k.allSandboxes(), clientv3.WithPrefix()),
		clientv3.OpGet(s.k.allProviders(), clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/attach/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/release/", clientv3.WithPrefix()),
	}, nil)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Revision: resp.Header.Revision}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		sb, err := sandboxCodec.decode(kv)
		if err != nil {
			s.report(string(kv.Key), kv.ModRevision, err)
			continue
		}
		snap.Sandboxes = append(snap.Sandboxes, sb)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		p, err := providerCodec.decode(kv)
		if err != nil {
			s.report(string(kv.Key), kv.ModRevision, err)
			continue
		}
		snap.Providers = append(snap.Providers, p)
	}
	for i, releasing := range []bool{false, true} {
		for _, kv := range resp.Responses[2+i].GetResponseRange().GetKvs() {
			// <prefix>/attach|release/<ws>/<provider>/<sandbox>
			rest := strings.TrimPrefix(string(kv.Key), s.k.prefix+"/")
			parts := strings.Split(rest, "/")
			if len(parts) != 4 {
				continue
			}
			snap.Attachments = append(snap.Attachments, Attachment{Workspace: parts[1], Provider: parts[2], Sandbox: parts[3], UID: string(kv.Value), Releasing: releasing})
		}
	}
	return snap, nil
}
