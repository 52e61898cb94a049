package store

import (
	"context"
	"maps"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// CreateProvider stores a new provider. The Txn compares
// ModRevision(provider) == 0.
func (s *Store) CreateProvider(ctx context.Context, p *shoalv1.Provider) (*shoalv1.Provider, error) {
	p = clone(p)
	m := s.newMeta(p.GetMeta())
	return update(ctx, s, updateSpec[*shoalv1.Provider]{
		codec: providerCodec,
		key:   s.k.provider(m.Workspace, m.Name),
		mutate: func(cur *shoalv1.Provider) (*shoalv1.Provider, error) {
			if cur != nil {
				if cur.GetMeta().GetDeletionTimestamp() != nil {
					return nil, shoal.AlreadyExists("provider %q already exists and is being deleted; wait for the deletion to finish", m.Name)
				}
				return nil, shoal.AlreadyExists("provider %q already exists", m.Name)
			}
			next := clone(p)
			return next, s.sealCredentials(next, nil)
		},
	})
}

// GetProvider reads one provider, credentials included (sealed, with a key
// ring: OpenCredentials opens them): callers that face users must redact
// them.
func (s *Store) GetProvider(ctx context.Context, ws, name string) (*shoalv1.Provider, error) {
	return get(ctx, s, providerCodec, s.k.provider(ws, name), name)
}

// UpdateProvider applies mutate through the update loop.
func (s *Store) UpdateProvider(ctx context.Context, ws, name string, pre Preconditions, mutate func(*shoalv1.Provider) error) (*shoalv1.Provider, error) {
	return update(ctx, s, updateSpec[*shoalv1.Provider]{
		codec: providerCodec,
		key:   s.k.provider(ws, name),
		pre:   pre,
		mutate: func(cur *shoalv1.Provider) (*shoalv1.Provider, error) {
			if cur == nil {
				return nil, shoal.NotFound("provider %q not found", name)
			}
			prev := maps.Clone(cur.Credentials)
			if err := mutate(cur); err != nil {
				return nil, err
			}
			// New values arrive in plaintext: sealed before the write.
			return cur, s.sealCredentials(cur, prev)
		},
	})
}
