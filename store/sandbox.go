package store

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// CreateSandbox stores a new sandbox in phase PROVISIONING together with an
// attachment key for each of its providers. It fills uid and created_at.
// The Txn compares ModRevision(sandbox) == 0 and, per provider, the
// ModRevision the provider was read at.
func (s *Store) CreateSandbox(ctx context.Context, sb *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
	sb = clone(sb)
	m := s.newMeta(sb.GetMeta())
	if sb.Status == nil {
		sb.Status = &shoalv1.SandboxStatus{}
	}
	sb.Status.Phase = shoalv1.SandboxPhase_PROVISIONING
	return update(ctx, s, updateSpec[*shoalv1.Sandbox]{
		codec: sandboxCodec,
		key:   s.k.sandbox(m.Workspace, m.Name),
		mutate: func(cur *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
			if cur != nil {
				if cur.GetMeta().GetDeletionTimestamp() != nil {
					return nil, shoal.AlreadyExists("sandbox %q already exists and is being deleted; wait for the deletion to finish", m.Name)
				}
				return nil, shoal.AlreadyExists("sandbox %q already exists", m.Name)
			}
			return clone(sb), nil
		},
		related: s.sandboxRelated,
	})
}

// CreateSandboxOn creates a sandbox like CreateSandbox, on a node chosen
// by p among the registry's Ready, uncordoned nodes that fit (nodes.go):
// spec.node is set in the create's own Txn, which also compares that the
// node's registry key exists and takes one of its slots.
//
// A request id (client-chosen, unique per create) makes the create safe to
// retry after an ambiguous failure: the uid is derived from it and the
// name, so a retry that finds the record it made returns that record
// instead of ALREADY_EXISTS.
func (s *Store) CreateSandboxOn(ctx context.Context, sb *shoalv1.Sandbox, p Placement, requestID string) (*shoalv1.Sandbox, error) {
	sb = clone(sb)
	m := s.newMeta(sb.GetMeta())
	if requestID != "" {
		m.Uid = uuid.NewSHA1(createNamespace, []byte(m.Workspace+"/"+m.Name+"/"+requestID)).String()
	}
	if sb.Status == nil {
		sb.Status = &shoalv1.SandboxStatus{}
	}
	if sb.Spec == nil {
		sb.Spec = &shoalv1.SandboxSpec{}
	}
	sb.Status.Phase = shoalv1.SandboxPhase_PROVISIONING
	var bind struct {
		cmps []clientv3.Cmp
		ops  []clientv3.Op
		why  string // why that node, if this call placed it
	}
	attempts := 0
	// The node chosen counts as this node's create in flight there until
	// the Txn has answered (then the cache's own-writes memo counts it).
	var hold func()
	defer func() {
		if hold != nil {
			hold()
		}
	}()
	created, err := update(ctx, s, updateSpec[*shoalv1.Sandbox]{
		codec: sandboxCodec,
		key:   s.k.sandbox(m.Workspace, m.Name),
		mutate: func(cur *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
			bind.why = ""
			if cur != nil {
				if requestID != "" && cur.GetMeta().GetUid() == m.Uid {
					return cur, nil // this create's own record: a retry
				}
				if cur.GetMeta().GetDeletionTimestamp() != nil {
					return nil, shoal.AlreadyExists("sandbox %q already exists and is being deleted; wait for the deletion to finish", m.Name)
				}
				return nil, shoal.AlreadyExists("sandbox %q already exists", m.Name)
			}
			next := clone(sb)
			// Chosen afresh on every attempt: a conflict means the
			// registry or the slots may have changed. The first choice
			// may come from the watch cache's copy of the registry; the
			// ones after a conflict read etcd.
			attempts++
			var err error
			// The first choice from the copy (placeFromCopy): the counts
			// include this node's creates in flight and those the copy
			// has not seen yet (placement.Tally), so a burst of concurrent
			// creates spreads (it did not before that: the hollow smoke
			// test saw 98/84/14/2/2 over five nodes).
			if bind.cmps, bind.ops, err = s.place(ctx, p, next, placeFromCopy && attempts == 1, &hold, &bind.why); err != nil {
				return nil, err
			}
			return next, nil
		},
		related: func(ctx context.Context, old, new *shoalv1.Sandbox, fromCopy bool) ([]clientv3.Cmp, []clientv3.Op, error) {
			cmps, ops, err := s.sandboxRelated(ctx, old, new, fromCopy)
			return append(cmps, bind.cmps...), append(ops, bind.ops...), err
		},
	})
	if err == nil && bind.why != "" {
		s.recordScheduled(created, bind.why)
	}
	return created, err
}

// placeFromCopy lets a create's first placement come from the watch
// cache's copy of the registry, so an uncontended create is one Txn. A
// node that registered a moment ago is chosen once the copy has it; a
// refusal from the copy is decided again from etcd (place).
const placeFromCopy = true

// createNamespace derives sandbox uids from create request ids.
var createNamespace = uuid.MustParse("5c3f7a52-4d0e-4f55-9a55-0b8f1c2d6e01")

// NodeOf is the node a sandbox belongs to: spec.node, or for a sandbox
// created before placement existed, the node that took the request.
func NodeOf(sb *shoalv1.Sandbox) string {
	if n := sb.GetSpec().GetNode(); n != "" {
		return n
	}
	return sb.GetStatus().GetNode()
}

// GetSandbox reads one sandbox.
func (s *Store) GetSandbox(ctx context.Context, ws, name string) (*shoalv1.Sandbox, error) {
	return get(ctx, s, sandboxCodec, s.k.sandbox(ws, name), name)
}

// SandboxRevision is the mod revision of a sandbox's record as of now (a
// linearizable read of its key alone, without the value: one etcd round
// trip and no wait for the watch cache). A reader that keeps what it made
// of one version of the record knows by it whether that version is still
// the current one: the egress proxy admits each connection by the policy
// of the current version, and reads the record itself only when it
// changed. A missing record is NotFound.
//
// With Options.Local the read goes through the node's own member in
// process; when that member cannot answer (a learner, stopped, removed)
// through the client.
func (s *Store) SandboxRevision(ctx context.Context, ws, name string) (int64, error) {
	key := s.k.sandbox(ws, name)
	if s.local != nil {
		rev, ok, err := s.local.ModRevision(ctx, key)
		switch {
		case err == nil && !ok:
			return 0, shoal.NotFound("sandbox %q not found", name)
		case err == nil:
			return rev, nil
		case ctx.Err() != nil:
			return 0, etcdErr(ctx, err)
		}
	}
	t0 := time.Now()
	resp, err := s.c.Get(ctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	s.metrics.EtcdRoundTrip(time.Since(t0))
	if len(resp.Kvs) == 0 {
		return 0, shoal.NotFound("sandbox %q not found", name)
	}
	return resp.Kvs[0].ModRevision, nil
}

// GetSandboxAt is GetSandbox and the revision the read reflects (the watch
// cache's, or etcd's): a watch from that revision follows on from the
// answer with nothing missed, whenever the record last changed (its own
// mod revision may be older than what the cache's event log or etcd's
// history still holds).
func (s *Store) GetSandboxAt(ctx context.Context, ws, name string) (*shoalv1.Sandbox, int64, error) {
	key := s.k.sandbox(ws, name)
	if k := kindOf(s, sandboxCodec); k != nil {
		fresh, err := k.waitFresh(ctx)
		if err != nil {
			return nil, 0, err
		}
		if fresh {
			e, ok, rev := k.getAt(key)
			switch {
			case !ok:
				return nil, rev, shoal.NotFound("sandbox %q not found", name)
			case e.err != nil:
				return nil, rev, e.err
			}
			return e.object(sandboxCodec, e.rev), rev, nil
		}
	}
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return nil, 0, etcdErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, shoal.NotFound("sandbox %q not found", name)
	}
	sb, err := sandboxCodec.decode(resp.Kvs[0])
	return sb, resp.Header.Revision, err
}

// UpdateSandbox applies mutate to the sandbox through the update loop. The
// sandbox must exist; pre, when set, must hold against the current state on
// every attempt. mutate may run several times.
//
// A sandbox whose deletion was requested is frozen: UpdateSandbox fails with
// FailedPrecondition, so nothing competes with its teardown.
func (s *Store) UpdateSandbox(ctx context.Context, ws, name string, pre Preconditions, mutate func(*shoalv1.Sandbox) error) (*shoalv1.Sandbox, error) {
	return s.updateSandbox(ctx, ws, name, pre, false, nil, mutate)
}

// updateSandbox is UpdateSandbox for the deletion protocol too (deleting
// set), optionally starting from a state read in the caller's own Txn.
func (s *Store) updateSandbox(ctx context.Context, ws, name string, pre Preconditions, deleting bool, start *cached[*shoalv1.Sandbox], mutate func(*shoalv1.Sandbox) error) (*shoalv1.Sandbox, error) {
	return update(ctx, s, updateSpec[*shoalv1.Sandbox]{
		start:    start,
		codec:    sandboxCodec,
		key:      s.k.sandbox(ws, name),
		intent:   s.k.intent(ws, name),
		deleting: deleting,
		help:     func(ctx context.Context, uid string) error { _, err := s.mark(ctx, ws, name, uid, nil); return err },
		pre:      pre,
		mutate: func(cur *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
			if cur == nil {
				return nil, shoal.NotFound("sandbox %q not found", name)
			}
			if cur.GetMeta().GetDeletionTimestamp() != nil && !deleting {
				return nil, shoal.FailedPrecondition("sandbox %q is being deleted", name)
			}
			if err := mutate(cur); err != nil {
				return nil, err
			}
			return cur, nil
		},
		related: s.sandboxRelated,
	})
}

// AttachProvider adds a provider to a live sandbox, writing its attachment
// key in the same Txn with a compare on the provider key. pre, when set,
// must hold. attached is false when the provider was attached already
// (nothing is written).
func (s *Store) AttachProvider(ctx context.Context, ws, name, provider string, pre Preconditions) (sb *shoalv1.Sandbox, attached bool, err error) {
	sb, err = s.UpdateSandbox(ctx, ws, name, pre, func(sb *shoalv1.Sandbox) error {
		attached = false
		if sb.GetMeta().GetDeletionTimestamp() != nil {
			return shoal.FailedPrecondition("sandbox %q is being deleted", name)
		}
		if !slices.Contains(sb.Spec.Providers, provider) {
			if len(sb.Spec.Providers) >= MaxProvidersPerSandbox {
				return shoal.Invalid("provider", "sandbox %q already has the maximum of %d providers", name, MaxProvidersPerSandbox)
			}
			sb.Spec.Providers = append(sb.Spec.Providers, provider)
			attached = true
		}
		return nil
	})
	return sb, attached && err == nil, err
}

// AttachedSandboxes names the live sandboxes of a workspace that a
// provider is attached to (its attach/ keys), sorted.
func (s *Store) AttachedSandboxes(ctx context.Context, ws, provider string) ([]string, error) {
	return s.keyNames(ctx, s.k.attachments(ws, provider))
}

// DetachProvider removes a provider from a sandbox and deletes its
// attachment key in the same Txn. pre, when set, must hold. detached is
// false when the provider was not attached (nothing is written; the
// sandbox is returned as it is).
func (s *Store) DetachProvider(ctx context.Context, ws, name, provider string, pre Preconditions) (sb *shoalv1.Sandbox, detached bool, err error) {
	sb, err = s.UpdateSandbox(ctx, ws, name, pre, func(sb *shoalv1.Sandbox) error {
		detached = false
		if sb.GetMeta().GetDeletionTimestamp() != nil {
			return shoal.FailedPrecondition("sandbox %q is being deleted; its providers are released when it is gone", name)
		}
		if i := slices.Index(sb.Spec.Providers, provider); i >= 0 {
			sb.Spec.Providers = slices.Delete(sb.Spec.Providers, i, i+1)
			detached = true
		}
		return nil
	})
	return sb, detached && err == nil, err
}

// MaxProvidersPerSandbox bounds spec.providers. Each provider adds two ops
// to both branches of the mark Txn (limits.go: MinEtcdTxnOps).
const MaxProvidersPerSandbox = 16

func live(sb *shoalv1.Sandbox) bool {
	return sb != nil && sb.GetMeta().GetDeletionTimestamp() == nil
}

// sandboxRelated keeps attachment keys in step with a sandbox change:
//
//   - a provider newly referenced by a live sandbox: Put attach/ key, and
//     compare the provider's ModRevision as read (it exists, not terminating);
//   - a live sandbox becoming DELETING: move each attach/ key to release/;
//   - a provider no longer referenced, or the sandbox removed: delete both.
//
// With fromCopy, a provider is looked up in the watch cache first (its
// ModRevision is compared all the same).
func (s *Store) sandboxRelated(ctx context.Context, old, new *shoalv1.Sandbox, fromCopy bool) ([]clientv3.Cmp, []clientv3.Op, error) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	ref := old
	if ref == nil {
		ref = new
	}
	ws, name := ref.GetMeta().GetWorkspace(), ref.GetMeta().GetName()
	var oldProv, newProv []string
	if old != nil {
		oldProv = old.GetSpec().GetProviders()
	}
	if new != nil {
		newProv = new.GetSpec().GetProviders()
	}
	for _, p := range newProv {
		had := slices.Contains(oldProv, p)
		switch {
		case live(new) && !(had && live(old)):
			rev, err := s.attachable(ctx, ws, p, fromCopy)
			if err != nil {
				return nil, nil, err
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k.provider(ws, p)), "=", rev))
			ops = append(ops, clientv3.OpPut(s.k.attachment(ws, p, name), new.GetMeta().GetUid()))
		case !live(new) && live(old) && had:
			ops = append(ops,
				clientv3.OpDelete(s.k.attachment(ws, p, name)),
				clientv3.OpPut(s.k.release(ws, p, name), new.GetMeta().GetUid()))
		case !live(new) && !had:
			return nil, nil, shoal.FailedPrecondition("sandbox %q is being deleted: provider %q cannot be attached", name, p)
		}
	}
	if old == nil || new == nil {
		// Created, or removed: a deletion intent left by an earlier
		// incarnation (or this one's) goes too.
		ops = append(ops, clientv3.OpDelete(s.k.intent(ws, name)), clientv3.OpDelete(s.k.torndown(ws, name)))
	}
	if new == nil && old != nil {
		// Removed: its node slot is free again.
		freed, err := s.unplace(ctx, old)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, freed...)
	}
	for _, p := range oldProv {
		if !slices.Contains(newProv, p) {
			ops = append(ops, clientv3.OpDelete(s.k.attachment(ws, p, name)), clientv3.OpDelete(s.k.release(ws, p, name)))
		}
	}
	return cmps, ops, nil
}

// attachable reads a provider that is about to gain an attachment and
// returns the ModRevision to compare. fromCopy takes it from the watch
// cache if the copy has it live; a provider the copy lacks, or has as
// being deleted, is read from etcd (the copy may lag a create, and a
// refusal must not rest on it).
func (s *Store) attachable(ctx context.Context, ws, provider string, fromCopy bool) (int64, error) {
	if fromCopy && s.cache != nil {
		if rev, ok := s.cache.providers.liveRev(s.k.provider(ws, provider)); ok {
			return rev, nil
		}
	}
	resp, err := s.c.Get(ctx, s.k.provider(ws, provider))
	if err != nil {
		return 0, etcdErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, shoal.FailedPrecondition("provider %q not found in workspace %q; create it first", provider, ws)
	}
	p, err := providerCodec.decode(resp.Kvs[0])
	if err != nil {
		return 0, err
	}
	if p.GetMeta().GetDeletionTimestamp() != nil {
		return 0, shoal.FailedPrecondition("provider %q is being deleted and takes no new attachments", provider)
	}
	return resp.Kvs[0].ModRevision, nil
}

// newMeta fills the server-owned fields of a new object's meta.
func (s *Store) newMeta(m *shoalv1.ObjectMeta) *shoalv1.ObjectMeta {
	if m.Workspace == "" {
		m.Workspace = DefaultWorkspace
	}
	m.Uid = uuid.NewString()
	m.CreatedAt = ts(s.now())
	m.DeletionTimestamp = nil
	m.ResourceVersion = 0
	return m
}

// get reads one object.
func get[T object](ctx context.Context, s *Store, c codec[T], key, name string) (T, error) {
	var zero T
	if k := kindOf(s, c); k != nil {
		fresh, err := k.waitFresh(ctx)
		if err != nil {
			return zero, err
		}
		if fresh {
			e, ok := k.get(key)
			switch {
			case !ok:
				return zero, shoal.NotFound("%s %q not found", c.kind, name)
			case e.err != nil:
				return zero, e.err
			}
			return e.object(c, e.rev), nil
		}
	}
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return zero, etcdErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return zero, shoal.NotFound("%s %q not found", c.kind, name)
	}
	return c.decode(resp.Kvs[0])
}
