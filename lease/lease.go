package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"shoal/internal/chaosbreak"
)

// Config of an elector.
type Config struct {
	// Prefix is the election key prefix (store.LeaderPrefix()).
	Prefix string
	// ID identifies this node in the election key's value.
	ID string
	// TTL of the lease. A lost leader is replaced after at most TTL.
	TTL time.Duration
	// RetryInterval between campaigns after an error.
	RetryInterval time.Duration
	// TermKey, if set, is where each winner records its term (node, fence,
	// since) for Current to read; it must lie outside Prefix.
	TermKey string
	Logger  *slog.Logger
}

// DefaultTTL is the lease TTL unless configured.
const DefaultTTL = 10 * time.Second

// Validate reports the first bad field.
func (c *Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("lease prefix: must be set")
	}
	if c.ID == "" {
		return errors.New("lease id: must be set")
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < time.Second {
		return fmt.Errorf("lease ttl: %s is below the 1s minimum", c.TTL)
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ErrNotLeader is returned by a term's own fenced write (its record)
// once the election key is gone or another's: the term is over.
var ErrNotLeader = errors.New("lease: not the leader: the election key is gone or another's")

// Leadership is one term of leadership. Its fencing token is its election
// key and that key's create revision (Key, Rev, as concurrency.Election
// exposes them): every leader-only write compares them, so it fails once
// the term is over even if this node has not noticed yet.
type Leadership struct {
	key    string
	rev    int64
	done   <-chan struct{}
	synced func(ctx context.Context) error
}

// MarkSynced records, in the term's record and fenced like every
// leader-only write, that the leader has caught up with the state it took
// over (Term.Synced): `cluster status` and the scale figures read it.
func (l *Leadership) MarkSynced(ctx context.Context) error {
	if l.synced == nil {
		return nil
	}
	return l.synced(ctx)
}

// Key is the leader's election key.
func (l *Leadership) Key() string { return l.key }

// Rev is the election key's create revision: the fencing token.
func (l *Leadership) Rev() int64 { return l.rev }

// Done is closed when the lease is lost.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Elector campaigns for leadership and runs the leader's work.
type Elector struct {
	c   *clientv3.Client
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	leader bool
	terms  int
}

// New returns an Elector.
func New(c *clientv3.Client, cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{c: c, cfg: cfg, log: cfg.Logger.With("subsystem", "lease")}, nil
}

// IsLeader reports whether this node holds leadership now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// Terms is how many times this node has won.
func (e *Elector) Terms() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.terms
}

// Run campaigns until ctx ends. Each time it wins it calls lead with a
// context that is cancelled the moment the lease is lost, and waits for lead
// to return before campaigning again. Run returns ctx's error.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, l *Leadership) error) error {
	for ctx.Err() == nil {
		if err := e.term(ctx, lead); err != nil && ctx.Err() == nil {
			e.log.Warn("leadership term ended", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(e.cfg.RetryInterval):
			}
		}
	}
	return ctx.Err()
}

func (e *Elector) term(ctx context.Context, lead func(context.Context, *Leadership) error) error {
	// The session's context outlives ctx once the session exists, so that
	// Close can still revoke the lease on a graceful stop (with ctx's, the
	// revoke would fail at once and the lease, with the term record on it,
	// would last its TTL). Until then, ctx ending aborts the grant.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	unhook := context.AfterFunc(ctx, scancel)
	sess, err := concurrency.NewSession(e.c, concurrency.WithTTL(int(e.cfg.TTL.Seconds())), concurrency.WithContext(sctx))
	unhook()
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	defer sess.Close() // revokes, within the TTL at most
	// The term's context ends with ctx or with the session.
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-sess.Done():
			if chaosbreak.Is("deaf-leader") {
				// Broken on purpose (chaos self-test): lead on until a
				// fenced write fails or the node stops.
				<-tctx.Done()
				return
			}
			cancel()
		case <-tctx.Done():
		}
	}()
	defer wg.Wait()
	defer cancel()

	el := concurrency.NewElection(sess, e.cfg.Prefix)
	if err := el.Campaign(tctx, e.cfg.ID); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	rec := termRecord{Node: e.cfg.ID, Fence: el.Rev(), Since: time.Now().UTC()}
	l := &Leadership{key: el.Key(), rev: el.Rev(), done: tctx.Done(),
		synced: func(ctx context.Context) error {
			r := rec
			r.Synced = time.Now().UTC()
			return e.record(ctx, sess, el, r)
		}}
	e.mu.Lock()
	e.leader, e.terms = true, e.terms+1
	e.mu.Unlock()
	e.log.Info("became leader", "key", el.Key(), "fence", el.Rev())
	_ = e.record(tctx, sess, el, rec)
	err = lead(tctx, l)
	e.mu.Lock()
	e.leader = false
	e.mu.Unlock()
	lost := tctx.Err() != nil && ctx.Err() == nil
	if ctx.Err() == nil && !lost {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = el.Resign(rctx)
		rcancel()
	}
	if lost {
		e.log.Warn("leader lease lost; leader-only work stopped")
		return errors.New("leader lease lost")
	}
	if ctx.Err() != nil {
		// Shutting down: give leadership up now rather than after the TTL.
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = el.Resign(rctx)
		rcancel()
	}
	return err
}
