package store

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	"shoal/encryption"
)

// The cluster's encryption state: which key seals provider credentials,
// and which keys it has rotated away from.
//
//	<prefix>/cluster/encryption   JSON keyState
//
// A node's key file is its own, so nodes can disagree: a node started
// without one would store credentials in plaintext, and one started with
// an old file would seal new values under a key the cluster rotated away
// from (and fail to open the current one). The record lets a node refuse
// to start with a key file that does not fit the cluster (AdmitKeyRing),
// and a rotation refuse to start while a live node seals with another key
// (apiserver RotateEncryptionKey, from the node registry).

type keyState struct {
	// Current is the key the cluster seals with; Fingerprint identifies
	// its secret (encryption.KeyRing.Fingerprint).
	Current     string `json:"current"`
	Fingerprint string `json:"fingerprint"`
	// Retired keys were current once and were rotated away from: no node
	// may seal with one again.
	Retired []string  `json:"retired,omitempty"`
	Since   time.Time `json:"since"`
}

// AdmitKeyRing checks this node's key ring against the cluster's: with no
// record yet, a node with a key ring records its current key; with one, a
// node without a key ring, or whose ring lacks the cluster's current key
// (or holds another secret under its name), or would seal with a retired
// key, is refused (FAILED_PRECONDITION saying what to fix). Run at start,
// before the node writes anything.
func (s *Store) AdmitKeyRing(ctx context.Context) error {
	key := s.k.encryption()
	for {
		st, rev, err := s.keyState(ctx)
		if err != nil {
			return err
		}
		if rev == 0 {
			if s.keys == nil {
				return nil
			}
			fp, _ := s.keys.Fingerprint(s.keys.Current())
			b, _ := json.Marshal(keyState{Current: s.keys.Current(), Fingerprint: fp, Since: s.now()})
			resp, err := s.txn(ctx, "record encryption key", key, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, []clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
			if err != nil {
				return err
			}
			if resp.Succeeded {
				return nil
			}
			continue // another node recorded its key first: check against it
		}
		if err := s.fits(st); err != nil {
			return err
		}
		return s.retiredInUse(ctx, st)
	}
}

// retiredInUse refuses a ring that lacks a retired key which stored
// credentials are still sealed with: the node could not open them (a
// rotation that stopped half-way, or one whose failures were not fixed).
// Providers are read only when the ring lacks a retired key, so a node
// whose file keeps every key pays nothing; registrations (RegisterNode)
// do not repeat it.
func (s *Store) retiredInUse(ctx context.Context, st keyState) error {
	var missing []string
	for _, k := range st.Retired {
		if _, ok := s.keys.Fingerprint(k); !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	uses := map[string]int{}
	first := map[string]string{}
	o := ListOptions{Limit: 500}
	for {
		page, err := s.ListProviders(ctx, "", o, nil)
		if err != nil {
			return err
		}
		for _, p := range page.Items {
			seen := map[string]bool{}
			for _, v := range p.Credentials {
				if k, ok := encryption.KeyOf(v); ok && slices.Contains(missing, k) && !seen[k] {
					seen[k] = true
					uses[k]++
					if first[k] == "" {
						first[k] = p.Meta.Workspace + "/" + p.Meta.Name
					}
				}
			}
		}
		if page.Next == nil {
			break
		}
		o = *page.Next
	}
	for _, k := range missing {
		if n := uses[k]; n > 0 {
			return shoal.FailedPrecondition("this node's --encryption-key-file lacks key %q, which the cluster rotated away from, and %d provider record(s) are still sealed with it (%s first): this node could not open them; keep the key in the file until `shoal admin rotate-encryption-key` re-encrypts them all",
				k, n, first[k])
		}
	}
	return nil
}

func (s *Store) fits(st keyState) error {
	since := st.Since.UTC().Format(time.RFC3339)
	if s.keys == nil {
		return shoal.FailedPrecondition("the cluster encrypts provider credentials (key %q, current since %s), and this node has no --encryption-key-file: it would store them in plaintext and could not open them; start it with the key file the other nodes use", st.Current, since)
	}
	fp, ok := s.keys.Fingerprint(st.Current)
	switch {
	case !ok:
		return shoal.FailedPrecondition("this node's --encryption-key-file lacks key %q, the cluster's current key (since %s): copy the key file the other nodes use", st.Current, since)
	case fp != st.Fingerprint:
		return shoal.FailedPrecondition("key %q of this node's --encryption-key-file is another secret than the cluster's key of that name (fingerprint %s, the cluster's %s): copy the key file the other nodes use", st.Current, fp, st.Fingerprint)
	case slices.Contains(st.Retired, s.keys.Current()):
		return shoal.FailedPrecondition("this node's --encryption-key-file makes %q current, and the cluster rotated away from it (to %q, since %s): an old key file would seal new credentials under an old key; copy the key file the other nodes use", s.keys.Current(), st.Current, since)
	}
	return nil
}

// keyState reads the record; rev 0: there is none.
func (s *Store) keyState(ctx context.Context) (keyState, int64, error) {
	key := s.k.encryption()
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return keyState{}, 0, etcdErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return keyState{}, 0, nil
	}
	st, err := parseKeyState(resp.Kvs[0].Value, key)
	return st, resp.Kvs[0].ModRevision, err
}

func parseKeyState(v []byte, key string) (keyState, error) {
	var st keyState
	if err := json.Unmarshal(v, &st); err != nil || st.Current == "" {
		return keyState{}, shoal.DataLoss("%s does not hold the cluster's encryption state (%v): restore it from a snapshot, or remove the key from etcd and restart the nodes (the first records its key)", key, err)
	}
	return st, nil
}

// BeginRotation records that the cluster seals with this node's current
// key from now on, the previous current key retired, before a rotation
// re-seals anything. Every node the registry knows (Ready or not: a
// NotReady one may come back) must have registered with this node's key,
// or the rotation is refused naming those that differ: they would go on
// sealing under their own key. The record's Txn compares the registry as
// read, so a node that registers meanwhile makes it check again; and a
// node registers only while the record fits its ring (RegisterNode), so
// none can register with a retired key afterwards. Rotating back to a
// retired key is refused: make a new key.
func (s *Store) BeginRotation(ctx context.Context) error {
	if s.keys == nil {
		return shoal.FailedPrecondition("this node has no --encryption-key-file: there is no key to encrypt with")
	}
	key, infos := s.k.encryption(), s.k.prefix+"/nodeinfo/"
	for {
		resp, err := s.txn(ctx, "read for rotation", infos, nil, []clientv3.Op{
			clientv3.OpGet(key), clientv3.OpGet(infos, clientv3.WithPrefix()), clientv3.OpGet(s.k.prefix+"/nodes/", clientv3.WithPrefix()),
		}, nil)
		if err != nil {
			return err
		}
		read := resp.Header.Revision
		var st keyState
		var rev int64
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if st, err = parseKeyState(kvs[0].Value, key); err != nil {
				return err
			}
			rev = kvs[0].ModRevision
		}
		cur := s.keys.Current()
		fp, _ := s.keys.Fingerprint(cur)
		if rev != 0 && st.Current == cur {
			if st.Fingerprint != fp {
				return shoal.FailedPrecondition("key %q of this node's --encryption-key-file is another secret than the cluster's key of that name: give every node the same key file", cur)
			}
			return nil
		}
		if slices.Contains(st.Retired, cur) {
			return shoal.FailedPrecondition("key %q was rotated away from already; add a new key with `shoal admin new-encryption-key` and rotate to that", cur)
		}
		var differ []string
		for _, n := range nodesFrom(resp.Responses[1].GetResponseRange().GetKvs(), resp.Responses[2].GetResponseRange().GetKvs(), nil, nil, s.k.prefix) {
			if n.Status.Corrupt != "" && !n.Status.Ready {
				// Which key it seals with cannot be read: as a NotReady
				// node, it may come back.
				differ = append(differ, n.Name+" (a corrupt registry record: `shoal node remove "+n.Name+"`)")
				continue
			}
			if k := n.EncryptionKey; k != s.keys.ID() {
				if k == "" {
					k = "no key file"
				}
				if !n.Status.Ready {
					k += ", NotReady: `shoal node remove " + n.Name + "` if it is gone"
				}
				differ = append(differ, n.Name+" ("+k+")")
			}
		}
		if len(differ) > 0 {
			slices.Sort(differ)
			return shoal.FailedPrecondition("nodes registered with another key than this node's %s: %s; give every node the same key file and restart it, then rotate", s.keys.ID(), strings.Join(differ, "; "))
		}
		next := keyState{Current: cur, Fingerprint: fp, Retired: st.Retired, Since: s.now()}
		if rev != 0 && st.Current != cur {
			next.Retired = append(slices.Clone(st.Retired), st.Current)
		}
		b, _ := json.Marshal(next)
		won, err := s.txn(ctx, "rotate encryption key", key, []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(key), "=", rev),
			clientv3.Compare(clientv3.ModRevision(infos), "<", read+1).WithPrefix(), // no registration since the read
		}, []clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
		if err != nil {
			return err
		}
		if won.Succeeded {
			s.log.Info("the cluster seals credentials with a new key", "key", cur, "retired", next.Retired)
			return nil
		}
	}
}
