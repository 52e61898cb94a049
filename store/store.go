package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/encryption"
	"shoal/metrics"
)

// DefaultWorkspace is used where a request names none.
const DefaultWorkspace = "default"

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix is the root of the keyspace; DefaultPrefix if empty.
	Prefix string
	Logger *slog.Logger
	// Now returns the wall clock used for created_at and deletion_timestamp.
	Now func() time.Time
	// Keys, when set, encrypts provider credentials at rest (credentials.go).
	Keys *encryption.KeyRing
	// Metrics, if set, counts the update loop's attempts and conflicts.
	Metrics *metrics.Metrics
	// Tracer, if set, makes a span per update (attempts, conflicts,
	// same-bytes commits, a lost fence).
	Tracer trace.Tracer
	// Events, if set, records what the store's writes did to sandboxes
	// (events.go: Recorder).
	Events Recorder
	// Local, if set, reads through the node's own etcd member in process
	// (SandboxRevision); an error from it falls back to the client.
	Local LocalReader
}

// LocalReader is a linearizable read of a key's mod revision through the
// node's own etcd member (embedetcd.Server), in process.
type LocalReader interface {
	ModRevision(ctx context.Context, key string) (rev int64, ok bool, err error)
}

// Store reads and writes shoal objects in etcd.
type Store struct {
	c   *clientv3.Client
	k   keys
	log *slog.Logger
	now func() time.Time
	// keys seal provider credentials; nil: stored as given.
	keys    *encryption.KeyRing
	metrics *metrics.Metrics // nil: none
	tracer  trace.Tracer
	events  Recorder // nil: none
	local   LocalReader

	corrupt corruptLog
	// cache, when set (UseCache), serves reads and client watches.
	cache *Cache
}

// New returns a Store over an etcd client.
func New(c *clientv3.Client, o Options) *Store {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("shoal/store")
	}
	return &Store{c: c, k: keys{prefix: o.Prefix}, log: o.Logger.With("subsystem", "store"), now: o.Now, keys: o.Keys, metrics: o.Metrics, tracer: o.Tracer, events: o.Events, local: o.Local}
}

// Client is the etcd client the store writes through.
func (s *Store) Client() *clientv3.Client { return s.c }

// LeaderPrefix is the etcd election prefix for this keyspace.
func (s *Store) LeaderPrefix() string { return s.k.leader() }

// LeaderTermKey is where the leader records its term (lease.Config.TermKey).
func (s *Store) LeaderTermKey() string { return s.k.leaderTerm() }

// SandboxKey is the etcd key of a sandbox (exposed for tests and chaos tools
// that write raw keys).
func (s *Store) SandboxKey(ws, name string) string { return s.k.sandbox(ws, name) }

// ProviderKey is the etcd key of a provider.
func (s *Store) ProviderKey(ws, name string) string { return s.k.provider(ws, name) }

// Preconditions restrict a write to the object the caller saw.
type Preconditions struct {
	UID             string
	ResourceVersion int64
}

func (p Preconditions) check(kind string, m *shoalv1.ObjectMeta) error {
	if p.UID != "" && m.GetUid() != p.UID {
		return shoal.Conflict("precondition failed: %s %q has uid %s, not %s", kind, m.GetName(), m.GetUid(), p.UID)
	}
	if p.ResourceVersion != 0 && m.GetResourceVersion() != p.ResourceVersion {
		return shoal.Conflict("precondition failed: %s %q is at resource_version %d, not %d; get it again and retry",
			kind, m.GetName(), m.GetResourceVersion(), p.ResourceVersion)
	}
	return nil
}

func (p Preconditions) set() bool { return p.UID != "" || p.ResourceVersion != 0 }

// applied logs a fenced write that committed, with its fencing token and
// commit revision: the chaos suite checks from these lines (JSON logs)
// that no write of a deposed leader was ever applied (chaos/fencedwrites.go).
// Every fenced Txn of the store reports here, so the check sees them all.
func (s *Store) applied(what, key string, f Fence, rev int64) {
	s.log.Info("fenced write: "+what, "name", key, "fence_key", f.Key(), "fence_rev", f.Rev(), "commit_rev", rev)
}

// fencedTxn is a leader-only write outside the update loop (node loss,
// repairs): one Txn of cmps plus the fence's compare, then or els. It has
// the update loop's span, metric and log: a "store.txn" span naming what
// and key, a committed write reported to applied, and a refusal for the
// fence (the leader key's create revision is not the fence's, read in
// the same Txn) counted in shoal_fenced_rejections_total and returned as
// fencedOut. els's responses come first in resp.Responses. Without a fence
// (tests) it is a plain Txn.
func (s *Store) fencedTxn(ctx context.Context, what, key string, fence Fence, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, fencedOut bool, err error) {
	ctx, span := s.tracer.Start(ctx, "store.txn", trace.WithAttributes(attribute.String("shoal.txn", what), attribute.String("shoal.key", key)))
	defer func() {
		span.SetAttributes(attribute.Bool("shoal.txn.succeeded", err == nil && resp.Succeeded), attribute.Bool("shoal.update.fenced", fencedOut))
		if err != nil {
			span.SetStatus(codes.Error, "txn failed")
			span.RecordError(errors.New(errorClass(err)))
		}
		span.End()
	}()
	if fence != nil {
		cmps = append(cmps, fenceCmp(fence))
		els = append(els, clientv3.OpGet(fence.Key(), clientv3.WithKeysOnly()))
	}
	resp, err = s.c.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, false, etcdErr(ctx, err)
	}
	if fence == nil {
		return resp, false, nil
	}
	if resp.Succeeded {
		s.applied(what, key, fence, resp.Header.Revision)
		return resp, false, nil
	}
	if fenceLost(fence, resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs()) {
		s.metrics.FencedRejection()
		return resp, true, nil
	}
	return resp, false, nil
}

// txn is one Txn outside the update loop, with the "store.txn" span that
// names what it does and its key; an error is etcdErr's.
func (s *Store) txn(ctx context.Context, what, key string, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, _, err := s.fencedTxn(ctx, what, key, nil, cmps, then, els)
	return resp, err
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func clone[T proto.Message](m T) T { return proto.Clone(m).(T) }
