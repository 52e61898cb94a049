package store

import (
	"context"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Sandboxes by uid. OpenShell's API (package openshellapi) names a sandbox
// by its id, which is shoal's uid, where shoal.v1 names it by workspace and
// name. The watch cache keeps an index of its records by uid (kindCache.uids,
// changed with the copy), so that finding the name of a uid reads no etcd
// when the copy holds it. A uid names one record for its whole life: a
// record made again under the same name has a new uid.

// indexUID adds (d > 0) or removes e's uid from the index (k.mu held). A
// removal leaves a uid that now names another key alone.
func (k *kindCache[T]) indexUID(e entry[T], d int) {
	if e.err != nil || e.ix.uid == "" {
		return
	}
	if d > 0 {
		k.uids[e.ix.uid] = e.key
	} else if k.uids[e.ix.uid] == e.key {
		delete(k.uids, e.ix.uid)
	}
}

// keyOfUID is the key of the copy's record with uid.
func (k *kindCache[T]) keyOfUID(uid string) (string, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	key, ok := k.uids[uid]
	return key, ok
}

// SandboxRefByUID returns the workspace and name of the sandbox whose uid
// is uid, or KindNotFound. The watch cache answers it: a uid it holds
// costs no etcd round trip (the name of a uid never changes); one it does
// not hold yet (made a moment ago through another node) is looked up again
// once the copy has caught up with etcd's current revision (one count-only
// read), as a Get from the cache would be. Without a listed cache, or one
// that cannot catch up, it lists the sandboxes from etcd (every one: a
// fallback, not the way).
//
// The sandbox may be gone by the time the caller reads it, or its name
// taken by a new one: a caller that reads it checks the uid of what it
// reads.
func (s *Store) SandboxRefByUID(ctx context.Context, uid string) (ws, name string, err error) {
	notFound := shoal.NotFound("sandbox with id %q not found", uid)
	if uid == "" {
		return "", "", notFound
	}
	if k := kindOf(s, sandboxCodec); k != nil && k.isListed() {
		if key, ok := k.keyOfUID(uid); ok {
			ws, name = keyRef(key)
			return ws, name, nil
		}
		fresh, err := k.waitFresh(ctx)
		if err != nil {
			return "", "", err
		}
		if fresh {
			key, ok := k.keyOfUID(uid)
			if !ok {
				return "", "", notFound
			}
			ws, name = keyRef(key)
			return ws, name, nil
		}
	}
	page, err := s.ListSandboxes(ctx, "", ListOptions{}, func(sb *shoalv1.Sandbox) bool { return sb.GetMeta().GetUid() == uid })
	if err != nil {
		return "", "", err
	}
	if len(page.Items) == 0 {
		return "", "", notFound
	}
	m := page.Items[0].GetMeta()
	return m.GetWorkspace(), m.GetName(), nil
}
