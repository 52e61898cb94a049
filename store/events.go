package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
)

// Sandbox events: their keys and transactions. Package events records
// them and owns the policy (what is recorded, how it is queued, coalesced
// and bounded, and how long it lives); this file only writes and reads
// what it is given (doc.go: Key layout).
//
// An event's key is <prefix>/events/<ws>/<sandbox>/<id>, and its id begins
// with its time (16 hex digits of Unix nanoseconds), so one sandbox's
// events are one short range, in time order. Every key is put on a lease
// the recording node granted for the event's time bucket, and etcd deletes
// it when that lease expires: nothing else deletes an event, nothing
// compares one, and no transaction of the state above reads one.

// EventLog writes and reads sandbox events.
type EventLog struct {
	c *clientv3.Client
	k keys
}

// NewEventLog returns the event log of the keyspace under prefix
// (DefaultPrefix if empty), through c.
func NewEventLog(c *clientv3.Client, prefix string) *EventLog {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &EventLog{c: c, k: keys{prefix: prefix}}
}

// EventLog is the event log of the store's keyspace, through its client.
func (s *Store) EventLog() *EventLog { return &EventLog{c: s.c, k: s.k} }

// EventKey is the etcd key of an event (for tests that look at it raw).
func (l *EventLog) EventKey(ev *shoalv1.Event) string {
	return l.k.event(ev.GetWorkspace(), ev.GetSandbox(), ev.GetId())
}

// GrantLease grants a lease that etcd revokes after ttl (rounded up to a
// whole second), with every event put on it.
func (l *EventLog) GrantLease(ctx context.Context, ttl time.Duration) (int64, error) {
	resp, err := l.c.Grant(ctx, int64(math.Ceil(ttl.Seconds())))
	if err != nil {
		return 0, eventErr(ctx, err)
	}
	return int64(resp.ID), nil
}

var _ events.Log = (*EventLog)(nil)

// Recorder is what the store needs of package events: the API's create
// records Scheduled, and the leader's writes NodeLost, Fenced and Removed,
// once their Txn has committed. Record never blocks and never fails.
type Recorder interface {
	Record(sb *shoalv1.Sandbox, e events.Event)
}

var _ Recorder = (*events.Recorder)(nil)

// record records e about sb, if the store has a Recorder.
func (s *Store) record(sb *shoalv1.Sandbox, e events.Event) {
	if s.events != nil {
		s.events.Record(sb, e)
	}
}

// WriteEvents writes evs: the plain ones in one Txn (a put each, which
// rewrites a coalesced event in place), each Once one in a Txn of its own
// that compares its key absent (an event that several nodes may record
// for one fact, such as a lost node's fence time, which every leader
// computes alike, carries an id derived from that fact, and the first
// write of it stands). It returns events.ErrLeaseGone, a
// KindFailedPrecondition error for a write etcd refused (too large, out of
// space, not permitted: writing it again would fail again), or a
// KindUnavailable one for a failure that may pass.
func (l *EventLog) WriteEvents(ctx context.Context, evs []events.Write) error {
	var puts []clientv3.Op
	for _, w := range evs {
		key, val, err := l.encodeEvent(w.Event)
		if err != nil {
			return err
		}
		op := clientv3.OpPut(key, string(val), clientv3.WithLease(clientv3.LeaseID(w.Lease)))
		if !w.Once {
			puts = append(puts, op)
			continue
		}
		if _, err := l.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(op).Commit(); err != nil {
			return eventErr(ctx, err)
		}
	}
	if len(puts) == 0 {
		return nil
	}
	if _, err := l.c.Txn(ctx).Then(puts...).Commit(); err != nil {
		return eventErr(ctx, err)
	}
	return nil
}

// encodeEvent returns an event's key and stored value: deterministic, with
// the output-only id (the key's last segment) and resource_version (the
// key's ModRevision) left out.
func (l *EventLog) encodeEvent(ev *shoalv1.Event) (string, []byte, error) {
	for _, f := range []struct{ name, v string }{{"workspace", ev.GetWorkspace()}, {"sandbox", ev.GetSandbox()}, {"id", ev.GetId()}} {
		if f.v == "" || strings.ContainsRune(f.v, '/') {
			return "", nil, shoal.FailedPrecondition("event %s %q cannot be part of a key", f.name, f.v)
		}
	}
	key := l.k.event(ev.Workspace, ev.Sandbox, ev.Id)
	id, rv := ev.Id, ev.ResourceVersion
	ev.Id, ev.ResourceVersion = "", 0
	b, err := marshal.Marshal(ev)
	ev.Id, ev.ResourceVersion = id, rv
	if err != nil {
		return "", nil, shoal.FailedPrecondition("event cannot be encoded: %v", err)
	}
	return key, b, nil
}

// decodeEvent reads a stored event; false for a value that does not
// decode or a key of another shape (skipped: an event is nobody's state).
func (l *EventLog) decodeEvent(kv *mvccpb.KeyValue) (*shoalv1.Event, bool) {
	parts := strings.Split(strings.TrimPrefix(string(kv.Key), l.k.allEvents()), "/")
	if len(parts) != 3 {
		return nil, false
	}
	ev := &shoalv1.Event{}
	if err := proto.Unmarshal(kv.Value, ev); err != nil {
		return nil, false
	}
	ev.Workspace, ev.Sandbox, ev.Id, ev.ResourceVersion = parts[0], parts[1], parts[2], kv.ModRevision
	return ev, true
}

// eventErr classifies a failed event write or read (WriteEvents).
func eventErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return events.ErrLeaseGone
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(rpctypes.Error(err), &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return shoal.FailedPrecondition("etcd refused the event write: %v", err)
	}
	return shoal.Unavailable("etcd: %v", err)
}

// EventFilter selects events: every field that is set must hold.
type EventFilter struct {
	// Workspace, if set, is the only workspace; Sandbox, if set, the only
	// sandbox name (of Workspace).
	Workspace, Sandbox string
	// UID, if set, is the only sandbox uid.
	UID string
	// Node, if set: only events of sandboxes on that node, or recorded by
	// it.
	Node string
}

// Matches reports whether ev is one of f's.
func (f EventFilter) Matches(ev *shoalv1.Event) bool {
	switch {
	case f.Workspace != "" && ev.GetWorkspace() != f.Workspace,
		f.Sandbox != "" && ev.GetSandbox() != f.Sandbox,
		f.UID != "" && ev.GetSandboxUid() != f.UID,
		f.Node != "" && ev.GetNode() != f.Node && ev.GetReportingNode() != f.Node:
		return false
	}
	return true
}

// prefix is the narrowest key range that holds every event f selects.
func (f EventFilter) prefix(k keys) string {
	switch {
	case f.Workspace != "" && f.Sandbox != "":
		return k.sandboxEvents(f.Workspace, f.Sandbox)
	case f.Workspace != "":
		return k.workspaceEvents(f.Workspace)
	}
	return k.allEvents()
}

// EventList is what ListEvents found.
type EventList struct {
	// Items are the newest events that matched, oldest first.
	Items []*shoalv1.Event
	// Revision is the etcd revision every page was read at.
	Revision int64
	// Omitted counts the older events that matched but did not fit.
	Omitted int
}

// eventPage is how many keys one read of ListEvents takes: a bound on
// what one etcd response holds, however many events there are.
const eventPage = 1000

// ListEvents reads the events f selects, a page at a time and every page
// at the revision of the first, and returns the newest limit of them
// (limit > 0), oldest first: by the time each last happened, then by when
// it first did. It holds at most about twice limit events at once,
// however many it reads.
func (l *EventLog) ListEvents(ctx context.Context, f EventFilter, limit int) (EventList, error) {
	prefix := f.prefix(l.k)
	end := clientv3.GetPrefixRangeEnd(prefix)
	var out EventList
	var kept []*shoalv1.Event
	trim := func(n int) {
		if len(kept) <= n {
			return
		}
		slices.SortFunc(kept, compareEvents)
		out.Omitted += len(kept) - n
		kept = slices.Delete(kept, 0, len(kept)-n)
	}
	for start := prefix; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(eventPage)}
		if out.Revision != 0 {
			opts = append(opts, clientv3.WithRev(out.Revision))
		}
		resp, err := l.c.Get(ctx, start, opts...)
		if err != nil {
			return EventList{}, etcdErr(ctx, err)
		}
		if out.Revision == 0 {
			out.Revision = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if ev, ok := l.decodeEvent(kv); ok && f.Matches(ev) {
				kept = append(kept, ev)
			}
		}
		if len(kept) > 2*limit+eventPage {
			trim(limit)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	trim(limit)
	slices.SortFunc(kept, compareEvents)
	out.Items = kept
	return out, nil
}

// compareEvents orders events oldest first: by the time each last
// happened, then by when it first did, then by sandbox and id.
func compareEvents(a, b *shoalv1.Event) int {
	if c := a.GetLastTime().AsTime().Compare(b.GetLastTime().AsTime()); c != 0 {
		return c
	}
	if c := a.GetFirstTime().AsTime().Compare(b.GetFirstTime().AsTime()); c != 0 {
		return c
	}
	if c := strings.Compare(a.GetWorkspace()+"/"+a.GetSandbox(), b.GetWorkspace()+"/"+b.GetSandbox()); c != 0 {
		return c
	}
	return strings.Compare(a.GetId(), b.GetId())
}

// WatchEvents streams the events f selects as they are written after
// revision fromRev (0: from now on): ADDED for a new event, MODIFIED for a
// repeat coalesced into one (its count and last time). Expiries are not
// sent. The channel closes when ctx ends; a compacted fromRev, or one
// etcd has not reached (no list of this cluster gave it out), is a
// terminal KindGone error, and a reader that falls behind by more than the
// buffer for SlowWatcherGrace a terminal KindResourceExhausted one.
func (l *EventLog) WatchEvents(ctx context.Context, f EventFilter, fromRev int64) <-chan Event[*shoalv1.Event] {
	out := make(chan Event[*shoalv1.Event], 64)
	go func() {
		defer close(out)
		fail := func(err error) {
			select {
			case out <- Event[*shoalv1.Event]{Err: err}:
			case <-ctx.Done():
			}
		}
		cur, err := l.c.Get(ctx, l.k.clusterID(), clientv3.WithCountOnly())
		if err != nil {
			fail(etcdErr(ctx, err))
			return
		}
		if fromRev > cur.Header.Revision {
			fail(shoal.Gone("resource_version %d is ahead of the store (at revision %d): this cluster never gave it out; list again and watch from the list's resource_version", fromRev, cur.Header.Revision))
			return
		}
		if fromRev == 0 {
			fromRev = cur.Header.Revision
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for wr := range l.c.Watch(wctx, f.prefix(l.k), clientv3.WithPrefix(), clientv3.WithRev(fromRev+1)) {
			if err := wr.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					fail(shoal.Gone("resource_version %d is too old (compacted at %d); list again and watch from the list's resource_version", fromRev, wr.CompactRevision))
				} else {
					fail(etcdErr(ctx, err))
				}
				return
			}
			for _, e := range wr.Events {
				if e.Type != clientv3.EventTypePut {
					continue // an expiry
				}
				ev, ok := l.decodeEvent(e.Kv)
				if !ok || !f.Matches(ev) {
					continue
				}
				typ := shoalv1.EventType_MODIFIED
				if e.IsCreate() {
					typ = shoalv1.EventType_ADDED
				}
				sent, slow := sendOrGiveUp(ctx, out, Event[*shoalv1.Event]{Type: typ, Object: ev, Revision: e.Kv.ModRevision})
				if slow {
					cancel()
					giveUp(ctx, out, fromRev)
				}
				if !sent {
					return
				}
				fromRev = e.Kv.ModRevision
			}
		}
		if ctx.Err() == nil {
			fail(shoal.Unavailable("watch ended: etcd lost its leader or closed the stream"))
		}
	}()
	return out
}

// placementWhy says why a create placed a sandbox on n: the request named
// it, or placement chose it among fit nodes of the considered ones.
func placementWhy(p Placement, n *shoalv1.Node, fit, considered int) string {
	if p.Node != "" {
		return "spec.node names it"
	}
	why := fmt.Sprintf("the fewest sandboxes (%d) of the %d nodes that fit", n.GetStatus().GetSandboxes(), fit)
	if considered > fit {
		why += fmt.Sprintf(" (%d of %d did not)", considered-fit, considered)
	}
	if len(p.Selector) > 0 {
		terms := make([]string, 0, len(p.Selector))
		for _, k := range slices.Sorted(maps.Keys(p.Selector)) {
			terms = append(terms, k+"="+p.Selector[k])
		}
		why += ", with node selector " + strings.Join(terms, ",")
	}
	return why
}

func (s *Store) recordScheduled(sb *shoalv1.Sandbox, why string) {
	node := sb.GetSpec().GetNode()
	s.record(sb, events.Event{Reason: events.Scheduled, Message: fmt.Sprintf("assigned to node %s: %s", node, why),
		Details: map[string]string{"node": node, "why": why}})
}

func (s *Store) recordNodeLost(sb *shoalv1.Sandbox, node string, since time.Time, msg string) {
	s.record(sb, events.Event{Reason: events.NodeLost, Message: msg, At: since,
		Details: map[string]string{"node": node, "lost_at": since.UTC().Format(time.RFC3339Nano)}})
}

// FencedEvent is the Fenced event of a sandbox of node, lost at lost: its
// fence time (lost + margin) has passed, so the node has frozen its
// containers by now, and its sandboxes' deletions complete without it
// (deletion.go: ownerProof). Every leader derives it alike, so it is
// recorded Once, at the fence time.
func FencedEvent(node string, lost time.Time, margin time.Duration) events.Event {
	return events.Event{Reason: events.Fenced, Once: true, At: lost.Add(margin),
		Message: fmt.Sprintf("node %s's fence time has passed (lost its lease at %s, fence margin %s): it has frozen its containers by now, and this sandbox's deletion completes without it",
			node, lost.UTC().Format(time.RFC3339), margin),
		Details: map[string]string{"node": node, "lost_at": lost.UTC().Format(time.RFC3339Nano), "fence_margin": margin.String()}}
}

// proof is which of step 3's proofs let a removal go (deletion.go).
type proof struct {
	kind proofKind
	node string    // the owner
	lost time.Time // proofFenced: when its loss was recorded
}

type proofKind int

const (
	proofTornDown    proofKind = iota + 1 // the owner recorded its teardown
	proofFenced                           // the owner is lost past its fence time
	proofNoContainer                      // never placed, or on a node that never registered
)

// recordRemoved records the removal of sb's record under pr (and, for a
// fenced owner, its Fenced event first, at the fence time, should no
// leader have recorded it yet).
func (s *Store) recordRemoved(sb *shoalv1.Sandbox, pr proof, margin time.Duration) {
	d := map[string]string{"node": pr.node}
	var msg string
	switch pr.kind {
	case proofTornDown:
		d["proof"] = "torn_down"
		msg = fmt.Sprintf("record removed: node %s removed the container", pr.node)
	case proofFenced:
		d["proof"] = "fenced"
		s.record(sb, FencedEvent(pr.node, pr.lost, margin))
		msg = fmt.Sprintf("record removed while node %s is lost and fenced; it removes the container when it is back", pr.node)
	default:
		d["proof"] = "no_container"
		msg = "record removed: it was never placed on a node, so no container exists"
		if pr.node != "" {
			msg = fmt.Sprintf("record removed: node %s never registered, so no container exists", pr.node)
		}
	}
	s.record(sb, events.Event{Reason: events.Removed, Message: msg, Details: d})
}
