package store

import (
	"context"
	"fmt"
	"maps"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/encryption"
)

// Provider credentials at rest. With a key ring (Options.Keys) every
// credential value is sealed (package encryption) before it is stored, in
// the write's own mutate, so the update loop compares and writes sealed
// bytes; the rest of the record stays readable. Reads return the values
// sealed: only OpenCredentials, called where a container's environment is
// made, opens them. A value this node cannot open is an error of that one
// provider (naming the key), never a crash or a hidden record.

// credentialAAD binds a sealed value to its place.
func credentialAAD(ws, provider, key string) string {
	return "shoal/provider/" + ws + "/" + provider + "/" + key
}

// sealCredentials seals p's plaintext values under the current key; sealed
// ones are left as they are (a label change keeps the bytes, so it stays a
// no-op when nothing else changed). prev are the stored record's values
// (nil for a create): a plaintext value equal to what prev's sealed value
// opens to keeps prev's bytes, so writing the same credentials again is a
// no-op too (a fresh nonce would make every such update a write). Without a
// key ring it does nothing.
func (s *Store) sealCredentials(p *shoalv1.Provider, prev map[string]string) error {
	if s.keys == nil {
		return nil
	}
	for k, v := range p.Credentials {
		if encryption.Sealed(v) {
			continue
		}
		aad := credentialAAD(p.Meta.GetWorkspace(), p.Meta.GetName(), k)
		if old, ok := prev[k]; ok && encryption.Sealed(old) {
			if pt, err := s.keys.Open(aad, old); err == nil && pt == v {
				p.Credentials[k] = old
				continue
			}
		}
		sealed, err := s.keys.Seal(aad, v)
		if err != nil {
			return fmt.Errorf("seal credential %q of provider %q: %w", k, p.Meta.GetName(), err)
		}
		p.Credentials[k] = sealed
	}
	return nil
}

// OpenCredentials returns p's credentials in plaintext. A value sealed
// with a key this node lacks (or does not open) fails the whole provider
// with FAILED_PRECONDITION naming the provider, the credential and the key,
// never the value.
func (s *Store) OpenCredentials(p *shoalv1.Provider) (map[string]string, error) {
	out := maps.Clone(p.GetCredentials())
	for k, v := range out {
		if !encryption.Sealed(v) {
			continue
		}
		pt, err := s.keys.Open(credentialAAD(p.Meta.GetWorkspace(), p.Meta.GetName(), k), v)
		if err != nil {
			return nil, shoal.FailedPrecondition("provider %q: credential %q cannot be decrypted: %v; give this node the key file the cluster uses (--encryption-key-file)", p.Meta.GetName(), k, err)
		}
		out[k] = pt
	}
	return out, nil
}

// RotateCredentials re-seals one provider's credentials under the current
// key through the update loop (a concurrent write is a retry, not a lost
// update): values sealed with another key are opened and sealed again,
// plaintext values (written before the cluster had a key ring) are sealed.
// It reports whether anything was rewritten; a provider already current
// writes nothing, so a rotation stopped half-way is finished by running it
// again.
func (s *Store) RotateCredentials(ctx context.Context, ws, name string) (bool, error) {
	if s.keys == nil {
		return false, shoal.FailedPrecondition("this node has no --encryption-key-file: there is no key to encrypt with")
	}
	changed := false
	_, err := update(ctx, s, updateSpec[*shoalv1.Provider]{
		codec: providerCodec,
		key:   s.k.provider(ws, name),
		mutate: func(cur *shoalv1.Provider) (*shoalv1.Provider, error) {
			changed = false
			if cur == nil {
				return nil, nil // deleted meanwhile: nothing to rotate
			}
			for k, v := range cur.Credentials {
				if key, ok := encryption.KeyOf(v); ok && key == s.keys.Current() {
					continue
				}
				pt := v
				if encryption.Sealed(v) {
					var err error
					if pt, err = s.keys.Open(credentialAAD(ws, name, k), v); err != nil {
						return nil, shoal.FailedPrecondition("provider %q: credential %q cannot be decrypted: %v", name, k, err)
					}
				}
				cur.Credentials[k] = pt
				changed = true
			}
			if !changed {
				return cur, nil
			}
			return cur, s.sealCredentials(cur, nil)
		},
	})
	return changed && err == nil, err
}
