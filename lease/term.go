package lease

import (
	"context"
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Term is who leads now, as any node can read it from etcd.
type Term struct {
	// Node is the leader's id: its election key's value.
	Node string
	// Key is the leader's election key, and Fence that key's create
	// revision: the fencing token its writes compare.
	Key   string
	Fence int64
	// Since is when the leader won; zero when it has not recorded that
	// (yet), or the record is of an earlier term.
	Since time.Time
	// Synced is when the leader had caught up with the state it took
	// over (its first resync: every pending deletion, terminating
	// provider and lost node listed and queued), recorded by a fenced
	// write; zero until then.
	Synced time.Time
}

// termRecord is the value at Config.TermKey.
type termRecord struct {
	Node   string    `json:"node"`
	Fence  int64     `json:"fence"`
	Since  time.Time `json:"since"`
	Synced time.Time `json:"synced,omitzero"`
}

// record writes the term's record under the term's own lease, so that it
// goes with the term, and fenced by the election key like every
// leader-only write: a deposed leader cannot overwrite its successor's.
// It is informational, so a failure is only logged (and returned: a
// refused compare as ErrNotLeader).
func (e *Elector) record(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, rec termRecord) error {
	if e.cfg.TermKey == "" {
		return nil
	}
	val, err := json.Marshal(rec)
	if err == nil {
		var resp *clientv3.TxnResponse
		resp, err = e.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())).
			Then(clientv3.OpPut(e.cfg.TermKey, string(val), clientv3.WithLease(sess.Lease()))).
			Commit()
		if err == nil && !resp.Succeeded {
			err = ErrNotLeader
		}
	}
	if err != nil && ctx.Err() == nil {
		e.log.Warn("could not record the leader term", "key", e.cfg.TermKey, "err", err)
	}
	return err
}

// Current reads the current term in one Txn: the leader is the election
// key under prefix with the lowest create revision (concurrency.Election's
// rule); its start comes from the record at termKey, if that record is of
// this term. ok is false when nobody leads. opts go to both reads:
// clientv3.WithSerializable() reads a member's own state, which answers
// even without a quorum.
func Current(ctx context.Context, c *clientv3.Client, prefix, termKey string, opts ...clientv3.OpOption) (t Term, ok bool, err error) {
	resp, err := c.Txn(ctx).Then(
		clientv3.OpGet(prefix, append(clientv3.WithFirstCreate(), opts...)...),
		clientv3.OpGet(termKey, opts...),
	).Commit()
	if err != nil {
		return Term{}, false, err
	}
	leaders := resp.Responses[0].GetResponseRange().GetKvs()
	if len(leaders) == 0 {
		return Term{}, false, nil
	}
	t = Term{Node: string(leaders[0].Value), Key: string(leaders[0].Key), Fence: leaders[0].CreateRevision}
	if recs := resp.Responses[1].GetResponseRange().GetKvs(); len(recs) == 1 {
		var r termRecord
		if json.Unmarshal(recs[0].Value, &r) == nil && r.Fence == t.Fence {
			t.Since, t.Synced = r.Since, r.Synced
		}
	}
	return t, true, nil
}
