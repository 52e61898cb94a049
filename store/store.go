package store

import (
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/chaosbreak"
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
}

// Store reads and writes shoal objects in etcd.
type Store struct {
	c   *clientv3.Client
	k   keys
	log *slog.Logger
	now func() time.Time

	corrupt corruptLog
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
	return &Store{c: c, k: keys{prefix: o.Prefix}, log: o.Logger.With("subsystem", "store"), now: o.Now}
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

// Fence makes a write conditional on leadership: the Txn compares the create
// revision of the leader's election key, so a deposed leader's write fails
// even if it still believes it leads.
type Fence struct {
	Key      string
	Revision int64
}

func (f *Fence) cmp() clientv3.Cmp {
	if chaosbreak.Is("unfenced-leader") {
		// Holds whether or not the leader key exists: no fence at all.
		return clientv3.Compare(clientv3.CreateRevision(f.Key), "<", f.Revision+1)
	}
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Revision)
}

// applied logs a fenced write that committed, with its fencing token and
// commit revision: the chaos suite checks from these lines (JSON logs)
// that no write of a deposed leader was ever applied (chaos/fencedwrites.go).
// Every fenced Txn of the store reports here, so the check sees them all.
func (s *Store) applied(what, key string, f *Fence, rev int64) {
	s.log.Info("fenced write: "+what, "name", key, "fence_key", f.Key, "fence_rev", f.Revision, "commit_rev", rev)
}

// ErrFenced is returned for a fenced write after leadership was lost.
var ErrFenced = &shoal.Error{Kind: shoal.KindUnavailable, Msg: "write fenced out: this node no longer holds the leader lease"}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func clone[T proto.Message](m T) T { return proto.Clone(m).(T) }
