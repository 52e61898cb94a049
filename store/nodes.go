package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/chaosbreak"
	"shoal/placement"
)

// The node registry and placement: the nodes/, nodeinfo/, cordon/ and
// placed/ keys (doc.go: Key layout).
//
// A node with a capacity (max_sandboxes N > 0) has slots "0".."N-1"; a
// sandbox placed there takes a free slot in its create Txn, which compares
// the slot absent, so concurrent creates can never exceed N and creates
// that take different slots do not conflict. On a node without capacity
// the slot is the sandbox's uid. The removal Txn deletes the slot.

// ErrNodeIDTaken matches (errors.Is) RegisterNode's refusal of a node id
// that another installation holds: a live node, or a NotReady node that
// was not removed (`shoal node remove`) and that the registration does not
// replace (Registration.Replace). Its kind is ALREADY_EXISTS.
var ErrNodeIDTaken = errors.New("node id is held by another installation")

// nodeIDTaken is a refusal that matches both ErrNodeIDTaken and its kind.
type nodeIDTaken struct{ err *shoal.Error }

func (e *nodeIDTaken) Error() string   { return e.err.Error() }
func (e *nodeIDTaken) Unwrap() []error { return []error{e.err, ErrNodeIDTaken} }

func idTaken(format string, a ...any) error {
	return &nodeIDTaken{err: &shoal.Error{Kind: shoal.KindAlreadyExists, Msg: fmt.Sprintf(format, a...)}}
}

// Registration is a node's entry in the registry.
type Registration struct {
	Node *shoalv1.Node
	// Instance identifies one installation of the node (its data dir):
	// a restarted node may take over its own previous registration, live
	// or not; another installation with the same id may not.
	Instance string
	// Replace lets this installation take over the id of a NotReady node
	// of another installation (`shoal node start --replace-node`). A live
	// node's id is never taken over.
	Replace bool
}

const instanceLabel = "shoal.dev/instance"

// value is the registry entry of r: its node without a status, labelled
// with its instance.
func (r Registration) value() (*shoalv1.Node, []byte, error) {
	n := proto.Clone(r.Node).(*shoalv1.Node)
	n.Status = nil
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[instanceLabel] = r.Instance
	val, err := marshal.Marshal(n)
	return n, val, err
}

// RegisterNode puts the node's registry key on lease and its info key, in
// one Txn that compares the registry key absent and the info key as read.
//
// The info key says which installation the id belongs to. A NotReady
// node's id is taken only by the same installation (a restart on its data
// dir), by any once the node was removed (its info key is gone), or with
// Replace: a new installation under an old id would otherwise inherit the
// old one's sandboxes, whose containers are on the old host's engine, and
// show them ERROR while they run on.
//
// If a live key exists and carries the same instance, it is this node's
// previous incarnation (a crash and restart within the TTL): its lease is
// revoked and the Txn retried. Otherwise ErrNodeIDTaken names the holder.
func (s *Store) RegisterNode(ctx context.Context, r Registration, lease clientv3.LeaseID) error {
	n, val, err := r.value()
	if err != nil {
		return err
	}
	key, info := s.k.node(n.Name), s.k.nodeInfo(n.Name)
	for attempt := 0; ; attempt++ {
		// A node registers only while its key ring fits the cluster's
		// encryption record as read (keystate.go), compared in the Txn:
		// a rotation that retired its key meanwhile makes it read again
		// and refuse, so it cannot go on sealing under a retired key.
		enc, encRev, err := s.keyState(ctx)
		if err != nil {
			return err
		}
		if encRev != 0 {
			if err := s.fits(enc); err != nil {
				return err
			}
		}
		infoRev, replaced, err := s.admitInstance(ctx, n.Name, r)
		if err != nil {
			return err
		}
		resp, err := s.txn(ctx, "register node", key, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.ModRevision(info), "=", infoRev),
			clientv3.Compare(clientv3.ModRevision(s.k.encryption()), "=", encRev)},
			[]clientv3.Op{clientv3.OpPut(key, string(val), clientv3.WithLease(lease)), clientv3.OpPut(info, string(val)),
				// Back: no longer lost, nor being forgotten (nodeloss.go).
				clientv3.OpDelete(s.k.lost(n.Name)), clientv3.OpDelete(s.k.forget(n.Name))},
			[]clientv3.Op{clientv3.OpGet(key)})
		if err != nil {
			return err
		}
		if resp.Succeeded {
			if replaced != nil {
				s.log.Warn("node id taken over from another installation (--replace-node): the sandboxes placed on it show ERROR here, their containers are on that installation's engine",
					"node", n.Name, "previous_address", replaced.Address, "previous_started", replaced.StartedAt.AsTime())
			}
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue // expired meanwhile, the info or the encryption record changed
		}
		holder, herr := decodeNode(kvs[0])
		if herr != nil {
			return shoal.FailedPrecondition("node id %q: %v; `shoal node remove %s` removes it", n.Name, herr, n.Name)
		}
		if holder.Labels[instanceLabel] != r.Instance || attempt > 2 {
			return idTaken("node id %q is held by a live node at %s (started %s); give this node another --node-id, or stop that one",
				n.Name, holder.Address, holder.StartedAt.AsTime().Format("2006-01-02 15:04:05Z07:00"))
		}
		if _, err := s.c.Revoke(ctx, clientv3.LeaseID(kvs[0].Lease)); err != nil && ctx.Err() != nil {
			return ctxErr(ctx)
		}
	}
}

// admitInstance reads the id's info key and says whether r may take the
// id over: it returns the info key's ModRevision (0: absent) for the
// registration's compare, and the previous registration if r replaces
// another installation's. A live holder is left to the registration's
// compare, which names it.
func (s *Store) admitInstance(ctx context.Context, id string, r Registration) (int64, *shoalv1.Node, error) {
	resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(s.k.nodeInfo(id)), clientv3.OpGet(s.k.node(id), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.forget(id), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return 0, nil, etcdErr(ctx, err)
	}
	infos := resp.Responses[0].GetResponseRange().GetKvs()
	if len(infos) == 0 {
		return 0, nil, nil // new, or removed
	}
	rev := infos[0].ModRevision
	var prev shoalv1.Node
	if err := proto.Unmarshal(infos[0].Value, &prev); err != nil {
		// Unreadable: nothing says whose it is; this registration
		// rewrites it.
		return rev, nil, nil
	}
	was := prev.Labels[instanceLabel]
	live := len(resp.Responses[1].GetResponseRange().GetKvs()) > 0
	// A record of a version before instances were recorded belongs to
	// no one in particular.
	if was == "" || was == r.Instance || live {
		return rev, nil, nil
	}
	if r.Replace {
		return rev, &prev, nil
	}
	seen := prev.StartedAt.AsTime().Format("2006-01-02 15:04:05Z07:00")
	if len(resp.Responses[2].GetResponseRange().GetKvs()) > 0 {
		return 0, nil, idTaken("node id %q belongs to another installation (last at %s, started %s), which `shoal node remove %s` is removing: start this node once %s has left `shoal node list`, or start it with --replace-node",
			id, prev.Address, seen, id, id)
	}
	return 0, nil, idTaken("node id %q belongs to another installation (NotReady, last at %s, started %s) and this --data-dir is new to it: if that node is gone for good, run `shoal node remove %s` first, or start this one with --replace-node (it takes over the sandboxes placed on %s, which show ERROR: their containers are on the old host); if this is that node, start it on its old --data-dir",
		id, prev.Address, seen, id, id)
}

// DeregisterNode removes a node's registry key (a graceful stop), leaving
// its info so that it shows as NotReady.
func (s *Store) DeregisterNode(ctx context.Context, id string) error {
	_, err := s.txn(ctx, "deregister node", s.k.node(id), nil, []clientv3.Op{clientv3.OpDelete(s.k.node(id))}, nil)
	return err
}

// CordonNode sets or clears a node's cordon. The node must be known.
func (s *Store) CordonNode(ctx context.Context, id string, cordon bool) error {
	var op clientv3.Op
	if cordon {
		op = clientv3.OpPut(s.k.cordon(id), "true")
	} else {
		op = clientv3.OpDelete(s.k.cordon(id))
	}
	resp, err := s.txn(ctx, "cordon node", s.k.cordon(id), []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.k.nodeInfo(id)), ">", 0)}, []clientv3.Op{op}, nil)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return shoal.NotFound("node %q not found; `shoal node list` shows the known nodes", id)
	}
	return nil
}

// Nodes returns every known node with its status, sorted by name.
//
// With a watch cache the sandbox counts come from its copy, once it has
// caught up with etcd's revision after the registry was read (so they
// are no older than the registry), instead of reading a slot key per
// sandbox of the fleet.
func (s *Store) Nodes(ctx context.Context) ([]*shoalv1.Node, error) {
	if s.cache != nil {
		nodes, _, err := s.registryRevs(ctx, false)
		if err != nil {
			return nil, err
		}
		if fresh, err := s.cache.sandboxes.waitFresh(ctx); err == nil && fresh {
			if counts, ok := s.cache.sandboxes.nodeCounts(); ok {
				for _, n := range nodes {
					n.Status.Sandboxes = int32(counts[n.Name])
				}
				return nodes, nil
			}
		}
	}
	return s.registry(ctx, true)
}

// registry reads the nodes in one Txn; with slots, each node's sandbox
// count from its slot keys (a key per sandbox of the fleet).
func (s *Store) registry(ctx context.Context, slots bool) ([]*shoalv1.Node, error) {
	nodes, _, err := s.registryRevs(ctx, slots)
	return nodes, err
}

// registryRevs is registry with the ModRevision of each live node's
// registry key, which placement compares.
func (s *Store) registryRevs(ctx context.Context, slots bool) ([]*shoalv1.Node, map[string]int64, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(s.k.prefix+"/nodeinfo/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/nodes/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k.prefix+"/cordon/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.prefix+"/lost/", clientv3.WithPrefix()),
	}
	if slots {
		ops = append(ops, clientv3.OpGet(s.k.prefix+"/placed/", clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, etcdErr(ctx, err)
	}
	r := resp.Responses
	var placed []*mvccpb.KeyValue
	if slots {
		placed = r[4].GetResponseRange().GetKvs()
	}
	live := r[1].GetResponseRange().GetKvs()
	nodes := nodesFrom(r[0].GetResponseRange().GetKvs(), live, r[2].GetResponseRange().GetKvs(), placed, s.k.prefix)
	lost := map[string]time.Time{}
	for _, kv := range r[3].GetResponseRange().GetKvs() {
		if t, err := parseLost(kv.Value); err == nil {
			lost[lastSegment(string(kv.Key))] = t
		}
	}
	for _, n := range nodes {
		// A NotReady node was last seen when its lease ran out.
		if t, ok := lost[n.Name]; ok && !n.Status.Ready {
			n.Status.LastSeen = timestamppb.New(t)
		}
	}
	return nodes, liveRevs(live), nil
}

// liveRevs maps node ids to the ModRevision of their registry keys.
func liveRevs(live []*mvccpb.KeyValue) map[string]int64 {
	revs := make(map[string]int64, len(live))
	for _, kv := range live {
		revs[lastSegment(string(kv.Key))] = kv.ModRevision
	}
	return revs
}

// GetNode returns one node, reading its keys only (every forwarded exec
// asks for its owner: the cost must not grow with the fleet).
func (s *Store) GetNode(ctx context.Context, id string) (*shoalv1.Node, error) {
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.k.nodeInfo(id)),
		clientv3.OpGet(s.k.node(id)),
		clientv3.OpGet(s.k.cordon(id), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.placedPrefix(id), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.k.lost(id)),
	).Commit()
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	r := resp.Responses
	nodes := nodesFrom(r[0].GetResponseRange().GetKvs(), r[1].GetResponseRange().GetKvs(), r[2].GetResponseRange().GetKvs(), nil, s.k.prefix)
	if len(nodes) != 1 || nodes[0].Name != id {
		return nil, shoal.NotFound("node %q not found; `shoal node list` shows the known nodes", id)
	}
	n := nodes[0]
	n.Status.Sandboxes = int32(r[3].GetResponseRange().GetCount())
	if kvs := r[4].GetResponseRange().GetKvs(); len(kvs) > 0 && !n.Status.Ready {
		if t, err := parseLost(kvs[0].Value); err == nil {
			n.Status.LastSeen = timestamppb.New(t)
		}
	}
	return n, nil
}

// decodeNode reads a registry record (nodes/<id> or nodeinfo/<id>). One
// that does not decode, or names another node than its key, is corrupt:
// the error says which key and why.
func decodeNode(kv *mvccpb.KeyValue) (*shoalv1.Node, error) {
	var n shoalv1.Node
	why := ""
	if err := proto.Unmarshal(kv.Value, &n); err != nil {
		why = err.Error()
	} else if id := lastSegment(string(kv.Key)); n.Name != id {
		why = fmt.Sprintf("it names node %q, not %q", n.Name, id)
	}
	if why != "" {
		return nil, shoal.DataLoss("registry record %q (revision %d) is corrupt: %s", kv.Key, kv.ModRevision, why)
	}
	return &n, nil
}

// nodesFrom builds the nodes of the registry's records. A node whose
// record is corrupt is listed by the id in its key with status.corrupt
// set; while its registry key (nodes/<id>) is corrupt it is not Ready, so
// placement skips it, and RemoveNode (ForgetNode) removes the record.
func nodesFrom(infos, live, cordons, placed []*mvccpb.KeyValue, prefix string) []*shoalv1.Node {
	byName := map[string]*shoalv1.Node{}
	corrupt := map[string]string{}
	add := func(kv *mvccpb.KeyValue, ready bool) {
		n, err := decodeNode(kv)
		if err != nil {
			id := lastSegment(string(kv.Key))
			corrupt[id] = err.Error()
			return
		}
		delete(n.Labels, instanceLabel)
		n.Status = &shoalv1.NodeStatus{Ready: ready}
		byName[n.Name] = n
	}
	for _, kv := range infos {
		add(kv, false)
	}
	for _, kv := range live {
		add(kv, true)
	}
	for id, why := range corrupt {
		n := byName[id]
		if n == nil {
			n = &shoalv1.Node{Name: id, Status: &shoalv1.NodeStatus{}}
			byName[id] = n
		}
		n.Status.Corrupt = why
	}
	for _, kv := range cordons {
		if n := byName[lastSegment(string(kv.Key))]; n != nil {
			n.Status.Cordoned = true
		}
	}
	for _, kv := range placed {
		// <prefix>/placed/<id>/<slot>
		rest := strings.TrimPrefix(string(kv.Key), prefix+"/placed/")
		if id, _, ok := strings.Cut(rest, "/"); ok && byName[id] != nil {
			byName[id].Status.Sandboxes++
		}
	}
	out := make([]*shoalv1.Node, 0, len(byName))
	for _, n := range byName {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Placement says where a new sandbox may go (package placement's policy).
type Placement = placement.Request

// place chooses a node for a new sandbox (package placement: which nodes
// fit, fewest sandboxes first) and returns the compares and ops that bind
// it in the create Txn: the node's registry key is the one the choice was
// made from (so no sandbox is placed on a node whose lease is gone, or
// that registered again with other labels or capacity), the node is not
// cordoned, and its slot is free.
//
// fromCopy chooses from the watch cache's copy of the registry, so that an
// uncontended create is one round trip; the compares make a stale copy a
// conflict, and a refusal (no node fits) is decided again from etcd.
func (s *Store) place(ctx context.Context, p Placement, sb *shoalv1.Sandbox, fromCopy bool, hold *func(), why *string) ([]clientv3.Cmp, []clientv3.Op, error) {
	c, err := s.placementNodes(ctx, fromCopy)
	if err != nil {
		return nil, nil, err
	}
	cmps, ops, err := s.placeOn(ctx, c, p, sb, hold, why)
	if err != nil && c.cached && shoal.KindOf(err) == shoal.KindFailedPrecondition {
		// A refusal from cached state is decided again from etcd's.
		nodes, revs, err := s.registryRevs(ctx, true)
		if err != nil {
			return nil, nil, err
		}
		return s.placeOn(ctx, candidates{nodes: nodes, live: revs}, p, sb, hold, why)
	}
	return cmps, ops, err
}

// candidates are the nodes placement chooses among, with the ModRevision
// of each live node's registry key as it was read; cached: counts or
// registry came from the watch cache.
type candidates struct {
	nodes  []*shoalv1.Node
	live   map[string]int64
	cached bool
}

// placementNodes are the nodes with their sandbox counts. With a watch
// cache the counts come from its copy of the sandboxes (a sandbox holds
// its slot from its create to its removal, in the same Txns), so a create
// does not read a key per sandbox of the fleet; with fromCopy the registry
// comes from the cache's copy too, and the create reads nothing before its
// Txn. The create's compares make a stale count or registry cost a retry,
// never an over-full, departed or cordoned node.
func (s *Store) placementNodes(ctx context.Context, fromCopy bool) (candidates, error) {
	var counts map[string]int
	ok := false
	if s.cache != nil {
		counts, ok = s.cache.sandboxes.nodeCounts()
	}
	if !ok {
		nodes, revs, err := s.registryRevs(ctx, true)
		return candidates{nodes: nodes, live: revs}, err
	}
	var c candidates
	if fromCopy && s.cache.liveNodes.usable() && s.cache.cordons.usable() {
		// Live nodes only: a refusal is decided again from etcd, with
		// the NotReady nodes named.
		live := s.cache.liveNodes.values()
		c = candidates{nodes: nodesFrom(nil, live, s.cache.cordons.values(), nil, s.k.prefix), live: liveRevs(live)}
	} else {
		nodes, revs, err := s.registryRevs(ctx, false)
		if err != nil {
			return candidates{}, err
		}
		c = candidates{nodes: nodes, live: revs}
	}
	c.cached = true
	for _, n := range c.nodes {
		n.Status.Sandboxes = int32(counts[n.Name])
	}
	return c, nil
}

// placeOn chooses among c's nodes for sb. With counts from the watch cache
// the choice is counted as a create in flight on that node, until *hold
// (set here, the previous choice's released) is called. *why says why
// that node, for its Scheduled event.
func (s *Store) placeOn(ctx context.Context, c candidates, p Placement, sb *shoalv1.Sandbox, hold *func(), why *string) ([]clientv3.Cmp, []clientv3.Op, error) {
	fit, err := placement.Filter(c.nodes, p, sb.GetSpec().GetResources())
	if err != nil {
		return nil, nil, err
	}
	if *hold != nil {
		(*hold)() // an earlier attempt's choice
		*hold = nil
	}
	var n *shoalv1.Node
	if c.cached && s.cache != nil {
		n, *hold = s.cache.sandboxes.pick(fit)
	} else {
		n = placement.Choose(fit, placement.Sandboxes, nil)
	}
	slot, err := s.freeSlot(ctx, n, sb.GetMeta().GetUid())
	if err != nil {
		return nil, nil, err
	}
	sb.Spec.Node = n.Name
	*why = placementWhy(p, n, len(fit), len(c.nodes))
	key := s.k.placed(n.Name, slot)
	var cmps []clientv3.Cmp
	if !chaosbreak.Is("no-registry-compare") {
		// The registry key as read: it exists (the node's lease holds)
		// and is the registration the choice was made from.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k.node(n.Name)), "=", c.live[n.Name]),
			clientv3.Compare(clientv3.CreateRevision(s.k.cordon(n.Name)), "=", 0))
	}
	if !chaosbreak.Is("no-capacity") {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
	}
	return cmps, []clientv3.Op{clientv3.OpPut(key, placedValue(sb))}, nil
}

func placedValue(sb *shoalv1.Sandbox) string {
	m := sb.GetMeta()
	return m.GetWorkspace() + "/" + m.GetName() + "/" + m.GetUid()
}

// freeSlot reads a node's taken slots and picks a free one
// (placement.Slot); on a node without capacity the slot is the uid.
func (s *Store) freeSlot(ctx context.Context, n *shoalv1.Node, uid string) (string, error) {
	if n.MaxSandboxes <= 0 {
		return uid, nil
	}
	resp, err := s.c.Get(ctx, s.k.placedPrefix(n.Name), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return "", etcdErr(ctx, err)
	}
	taken := map[string]bool{}
	for _, kv := range resp.Kvs {
		taken[lastSegment(string(kv.Key))] = true
	}
	return placement.Slot(n, taken, nil)
}

// unplace returns the ops that free a removed sandbox's slot.
func (s *Store) unplace(ctx context.Context, sb *shoalv1.Sandbox) ([]clientv3.Op, error) {
	node := sb.GetSpec().GetNode()
	if node == "" {
		return nil, nil
	}
	resp, err := s.c.Get(ctx, s.k.placedPrefix(node), clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(ctx, err)
	}
	want := placedValue(sb)
	var ops []clientv3.Op
	for _, kv := range resp.Kvs {
		if string(kv.Value) == want {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	return ops, nil
}

// Candidates names the nodes a create of sb could be placed on now: advice
// for checks before a create, which decides from the registry in its own
// Txn. It reads the watch cache's copy of the registry and counts; without
// a listed cache, the registry from etcd without the counts (no read of a
// key per sandbox), so a full node may be named.
func (s *Store) Candidates(ctx context.Context, p Placement, sb *shoalv1.Sandbox) ([]string, error) {
	var c candidates
	if s.cache != nil && s.cache.sandboxes.isListed() {
		var err error
		if c, err = s.placementNodes(ctx, true); err != nil {
			return nil, err
		}
	} else {
		nodes, _, err := s.registryRevs(ctx, false)
		if err != nil {
			return nil, err
		}
		c.nodes = nodes
	}
	fit, err := placement.Filter(c.nodes, p, sb.GetSpec().GetResources())
	if err != nil {
		return nil, err
	}
	names := make([]string, len(fit))
	for i, n := range fit {
		names[i] = n.Name
	}
	return names, nil
}
