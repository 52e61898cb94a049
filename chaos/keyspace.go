package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/backoff"
)

// A KeyspaceWatch follows, through one etcd watch, the keys that placement
// and node liveness are made of (store/nodes.go):
//
//	<prefix>/nodeinfo/<id>        a node's capacity (max_sandboxes)
//	<prefix>/nodes/<id>           its registry key, on its lease: present = Ready
//	<prefix>/placed/<id>/<slot>   one per sandbox placed on it
//	<prefix>/sandboxes/<ws>/<n>   the records, whose spec.node is the placement
//
// They sort together (nodeinfo < nodes < placed < providers < release <
// sandboxes), so one watch over that range delivers them in revision order
// and the state is known at every revision, not only at samples. At the end
// of each revision that created a sandbox it checks:
//
//   - 13, within capacity: the node the sandbox was placed on holds no more
//     sandboxes than its max_sandboxes (when it has one);
//   - 14, placed on a Ready node: the node's registry key exists (a create
//     compares it, so a sandbox is never placed on a node whose lease is
//     gone);
//
// and, at the end of every revision that changed records or slots, that
// each node's placed/ slots are exactly its records (13 as well: a create
// without its slot compare can overwrite another create's slot).
//
// It also stamps every change of a registry key with the time the watch
// delivered it: when a node's lease expired (or was revoked) and when it
// registered again, as invariant 9 needs (fencing.go). The client must be
// one that no fault cuts off.
type KeyspaceWatch struct {
	cli    *clientv3.Client
	prefix string
	now    func() time.Time
	ready  chan struct{}

	mu         sync.Mutex
	wctx       context.Context // the open watch's, for progress requests
	progress   int64           // every change up to this revision is applied
	st         ksState
	pending    int64 // the revision applied but not yet checked
	creates    []ksCreate
	touched    map[string]bool // nodes whose records or slots changed at pending
	mismatched map[string]bool
	reg        map[string][]RegEvent
	capacity   []string // invariant 13 details
	dead       []string // invariant 14 details
	fig        KeyspaceFigures
}

// RegEvent is a change of a node's registry key as the watch delivered it.
type RegEvent struct {
	At  time.Time `json:"at"`
	Rev int64     `json:"rev"`
	// Present: the node registered (Ready); absent: its lease expired, was
	// revoked by a graceful stop, or the key was deleted.
	Present bool `json:"present"`
	// Initial marks the state found when the watch started.
	Initial bool `json:"initial,omitempty"`
}

// KeyspaceFigures are the watch's figures for the report.
type KeyspaceFigures struct {
	Creates int `json:"creates"`
	// MaxPlaced is, per node, the most sandboxes it held right after a
	// create; Capacity its max_sandboxes (0: none).
	MaxPlaced map[string]int   `json:"max_placed"`
	Capacity  map[string]int32 `json:"capacity"`
	// Restarts counts watches opened again after an error; Resyncs the
	// times the watch fell behind compaction and started over from a
	// fresh read (changes in between are not seen one by one).
	Restarts int   `json:"watch_restarts"`
	Resyncs  int   `json:"watch_resyncs"`
	Revision int64 `json:"revision"` // the last revision checked
}

type ksRecord struct {
	node, ref string // spec.node; "<ws>/<name>/<uid>", as a slot's value
}

type ksState struct {
	nodes   map[string]bool
	maxOf   map[string]int32
	recs    map[string]ksRecord        // sandbox key → record
	byNode  map[string]map[string]bool // node → refs of its records
	placed  map[string]string          // slot key → value
	slotsOf map[string]map[string]int  // node → value → slots holding it
}

type ksCreate struct {
	ref, node string
	rev       int64
}

// NewKeyspaceWatch watches the keyspace under prefix through cli.
func NewKeyspaceWatch(cli *clientv3.Client, prefix string) *KeyspaceWatch {
	return &KeyspaceWatch{cli: cli, prefix: strings.TrimSuffix(prefix, "/"), now: time.Now, ready: make(chan struct{}),
		touched: map[string]bool{}, mismatched: map[string]bool{}, reg: map[string][]RegEvent{},
		fig: KeyspaceFigures{MaxPlaced: map[string]int{}, Capacity: map[string]int32{}}}
}

// Ready is closed once the watch has read the starting state: changes from
// then on are seen.
func (w *KeyspaceWatch) Ready() <-chan struct{} { return w.ready }

func (w *KeyspaceWatch) rangeStart() string { return w.prefix + "/nodeinfo/" }
func (w *KeyspaceWatch) rangeEnd() string   { return w.prefix + "/sandboxes0" } // just past sandboxes/

// Run reads the starting state, then follows every change until ctx ends;
// a broken watch is opened again from the revision after the last one seen.
// It returns nil when ctx ends, or the error of the first read if that
// never succeeds.
func (w *KeyspaceWatch) Run(ctx context.Context) error {
	var rev int64
	err := backoff.Retry(ctx, harnessRetry, func(int) error {
		var err error
		rev, err = w.resync(ctx, true)
		return err
	})
	if err != nil {
		return nil // only ctx ends the retries
	}
	close(w.ready)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := w.cli.Watch(wctx, w.rangeStart(), clientv3.WithRange(w.rangeEnd()), clientv3.WithRev(rev+1))
		w.mu.Lock()
		w.wctx = wctx
		w.mu.Unlock()
		for resp := range ch {
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					if r, err := w.resync(ctx, false); err == nil {
						rev = r
					}
				}
				break
			}
			if resp.IsProgressNotify() {
				w.mu.Lock()
				w.progress = max(w.progress, resp.Header.Revision)
				w.mu.Unlock()
				continue
			}
			rev = max(rev, w.deliver(resp.Events))
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
		w.mu.Lock()
		w.fig.Restarts++
		w.mu.Unlock()
		_ = backoff.Sleep(ctx, 100*time.Millisecond) // before watching again
	}
	w.mu.Lock()
	w.check()
	w.mu.Unlock()
	return nil
}

// resync reads the whole range at one revision and makes it the state. The
// first read sets the registry's initial events; a later one (the watch
// fell behind compaction) records the registry keys that changed meanwhile,
// stamped now.
func (w *KeyspaceWatch) resync(ctx context.Context, first bool) (int64, error) {
	resp, err := w.cli.Get(ctx, w.rangeStart(), clientv3.WithRange(w.rangeEnd()))
	if err != nil {
		return 0, err
	}
	at := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.check()
	prev := w.st.nodes
	w.st = ksState{}
	for _, kv := range resp.Kvs {
		w.apply(kv, false, time.Time{})
	}
	w.touched = map[string]bool{}
	w.creates = nil
	if !first {
		w.fig.Resyncs++
	}
	ids := map[string]bool{}
	for id := range w.st.maxOf {
		ids[id] = true
	}
	for id := range w.st.nodes {
		ids[id] = true
	}
	for id := range prev {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if first || prev[id] != w.st.nodes[id] {
			w.reg[id] = append(w.reg[id], RegEvent{At: at, Rev: resp.Header.Revision, Present: w.st.nodes[id], Initial: first})
		}
	}
	w.pending = resp.Header.Revision
	w.fig.Revision = resp.Header.Revision
	w.progress = max(w.progress, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// deliver applies one watch response's events, checking each revision
// once all its events are applied (etcd never splits a revision across
// responses), and returns the last revision.
func (w *KeyspaceWatch) deliver(evs []*clientv3.Event) int64 {
	at := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var last int64
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		if rev > w.pending {
			w.check()
			w.pending = rev
		}
		if ev.Type == clientv3.EventTypeDelete {
			w.apply(ev.Kv, true, at)
		} else {
			w.apply(ev.Kv, false, at)
		}
		last = rev
	}
	w.check()
	w.progress = max(w.progress, last)
	return last
}

// Sync waits until the watch has applied every change committed before the
// call (it asks etcd for a progress notification on the watch), so that
// the checks see everything up to now: call it after the traffic stopped
// and before the checks. It returns ctx's error if that does not happen.
func (w *KeyspaceWatch) Sync(ctx context.Context) error {
	resp, err := w.cli.Get(ctx, w.rangeStart(), clientv3.WithRange(w.rangeEnd()), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	for {
		w.mu.Lock()
		done, wctx := w.progress >= resp.Header.Revision, w.wctx
		w.mu.Unlock()
		if done {
			return nil
		}
		if wctx != nil {
			_ = w.cli.RequestProgress(wctx) // a watch being reopened: ask again
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // between progress requests
		}
	}
}

// apply changes the state by one key; at is the delivery time of a watch
// event, zero for a read.
func (w *KeyspaceWatch) apply(kv *mvccpb.KeyValue, deleted bool, at time.Time) {
	st := &w.st
	if st.nodes == nil {
		*st = ksState{nodes: map[string]bool{}, maxOf: map[string]int32{}, recs: map[string]ksRecord{},
			byNode: map[string]map[string]bool{}, placed: map[string]string{}, slotsOf: map[string]map[string]int{}}
	}
	kind, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), w.prefix+"/"), "/")
	switch kind {
	case "nodes":
		if st.nodes[rest] == !deleted {
			return // a rewrite of a live key
		}
		if deleted {
			delete(st.nodes, rest)
		} else {
			st.nodes[rest] = true
		}
		if !at.IsZero() {
			w.reg[rest] = append(w.reg[rest], RegEvent{At: at, Rev: kv.ModRevision, Present: !deleted})
		}
	case "nodeinfo":
		var n shoalv1.Node
		if deleted || proto.Unmarshal(kv.Value, &n) != nil {
			delete(st.maxOf, rest)
			return
		}
		st.maxOf[rest] = n.MaxSandboxes
		w.fig.Capacity[rest] = n.MaxSandboxes
	case "placed":
		node, _, _ := strings.Cut(rest, "/")
		key := string(kv.Key)
		if old, ok := st.placed[key]; ok {
			st.slotsOf[node][old]--
			if st.slotsOf[node][old] == 0 {
				delete(st.slotsOf[node], old)
			}
			delete(st.placed, key)
		}
		if !deleted {
			st.placed[key] = string(kv.Value)
			if st.slotsOf[node] == nil {
				st.slotsOf[node] = map[string]int{}
			}
			st.slotsOf[node][string(kv.Value)]++
		}
		w.touched[node] = true
	case "sandboxes":
		key := string(kv.Key)
		if old, ok := st.recs[key]; ok {
			if old.node != "" {
				delete(st.byNode[old.node], old.ref)
				w.touched[old.node] = true
			}
			delete(st.recs, key)
		}
		if deleted {
			return
		}
		var sb shoalv1.Sandbox
		if proto.Unmarshal(kv.Value, &sb) != nil {
			return // corrupt: its node cannot be known
		}
		m := sb.GetMeta()
		r := ksRecord{node: sb.GetSpec().GetNode(), ref: m.GetWorkspace() + "/" + m.GetName() + "/" + m.GetUid()}
		st.recs[key] = r
		if r.node == "" {
			return // placed before placement existed: no slot
		}
		if st.byNode[r.node] == nil {
			st.byNode[r.node] = map[string]bool{}
		}
		st.byNode[r.node][r.ref] = true
		w.touched[r.node] = true
		if !at.IsZero() && kv.Version == 1 {
			w.creates = append(w.creates, ksCreate{ref: r.ref, node: r.node, rev: kv.ModRevision})
		}
	}
}

// check checks the pending revision: its creates, and the slots of the
// nodes it touched.
func (w *KeyspaceWatch) check() {
	st := &w.st
	for _, c := range w.creates {
		w.fig.Creates++
		n := len(st.byNode[c.node])
		w.fig.MaxPlaced[c.node] = max(w.fig.MaxPlaced[c.node], n)
		if !st.nodes[c.node] {
			w.dead = append(w.dead, fmt.Sprintf("sandbox %s was created at rev %d on node %s, whose registry key did not exist then (the node was not Ready)", c.ref, c.rev, c.node))
		}
		if m := st.maxOf[c.node]; m > 0 && int32(n) > m {
			w.capacity = append(w.capacity, fmt.Sprintf("sandbox %s was created at rev %d on node %s, which then held %d sandboxes, over its max_sandboxes %d", c.ref, c.rev, c.node, n, m))
		}
	}
	w.creates = nil
	for node := range w.touched {
		bad := slotMismatch(st.byNode[node], st.slotsOf[node])
		if bad != "" && !w.mismatched[node] {
			w.capacity = append(w.capacity, fmt.Sprintf("at rev %d node %s's placed/ slots do not match its records: %s", w.pending, node, bad))
		}
		w.mismatched[node] = bad != ""
	}
	clear(w.touched)
	if w.pending > w.fig.Revision {
		w.fig.Revision = w.pending
	}
}

// slotMismatch says how a node's slots differ from its records: each record
// must hold exactly one slot, and each slot name a record.
func slotMismatch(recs map[string]bool, slots map[string]int) string {
	var out []string
	for _, ref := range slices.Sorted(maps.Keys(recs)) {
		switch n := slots[ref]; {
		case n == 0:
			out = append(out, ref+" holds no slot")
		case n > 1:
			out = append(out, fmt.Sprintf("%s holds %d slots", ref, n))
		}
	}
	for _, ref := range slices.Sorted(maps.Keys(slots)) {
		if !recs[ref] {
			out = append(out, "a slot names "+ref+", which is not a record of the node")
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

// Registry is every node's registry changes so far, oldest first.
func (w *KeyspaceWatch) Registry() map[string][]RegEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]RegEvent, len(w.reg))
	for id, evs := range w.reg {
		out[id] = slices.Clone(evs)
	}
	return out
}

// Violations are invariants 13 and 14 so far.
func (w *KeyspaceWatch) Violations(scn string) []Violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	var v []Violation
	for _, d := range w.capacity {
		v = append(v, Violation{invCapacity, scn, d})
	}
	for _, d := range w.dead {
		v = append(v, Violation{invPlacedReady, scn, d})
	}
	return v
}

// Figures are the watch's counts so far.
func (w *KeyspaceWatch) Figures() KeyspaceFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.fig
	f.MaxPlaced, f.Capacity = maps.Clone(f.MaxPlaced), maps.Clone(f.Capacity)
	return f
}

// sortedIDs returns a map's keys in order.
func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
