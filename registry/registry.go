package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/metrics"
	"shoal/store"
)

// Config of a Registry.
type Config struct {
	Store *store.Store
	Etcd  *clientv3.Client
	// Metrics, if set, counts renewals and their round trips.
	Metrics *metrics.Metrics
	// Node is this node's entry (name, address, labels, capacity, ...).
	Node *shoalv1.Node
	// Instance identifies this node's installation (see store.Registration).
	Instance string
	// Replace takes over the id from another installation whose node is
	// NotReady (store.Registration.Replace), at the first registration
	// only: one that comes after a lost lease never does, so an
	// installation that was replaced meanwhile stops.
	Replace bool
	// TTL of the liveness lease.
	TTL    time.Duration
	Logger *slog.Logger
	// Now is the clock (tests); it must carry a monotonic reading, as
	// time.Now does, so that a process stopped and resumed sees the time
	// it was stopped.
	Now func() time.Time
}

// DefaultTTL is the liveness lease's TTL unless configured.
const DefaultTTL = 10 * time.Second

// Registry holds this node's registration.
type Registry struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	current *registration // nil while not registered
	renewed time.Time     // when the lease was last known to be renewed
	gen     uint64        // registrations so far
}

// registration is one lease and the registry key on it.
type registration struct {
	lease clientv3.LeaseID
	// renew carries the send time of each renewal etcd accepted; it
	// closes when the lease is gone (expired, revoked, or past its TTL
	// by this node's clock).
	renew  <-chan time.Time
	cancel context.CancelFunc // stops the keep-alive
	done   chan struct{}      // closed when the keep-alive has returned
}

// stop ends the keep-alive and waits for it.
func (g *registration) stop() {
	g.cancel()
	<-g.done
}

// New validates cfg.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil || cfg.Etcd == nil || cfg.Node == nil || cfg.Node.Name == "" {
		return nil, errors.New("registry: store, etcd client and node are required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("--node-ttl: %s is below the 1s minimum", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{cfg: cfg, log: cfg.Logger.With("subsystem", "registry")}, nil
}

// Register takes this node's registry key once, synchronously, so that a
// second node with a live node's id fails at start with one clear line.
// Start keeps it afterwards; the keep-alive runs until ctx ends.
func (r *Registry) Register(ctx context.Context) error {
	// The lease's life is counted from before the grant: etcd counts it
	// from when it granted, which is later.
	asked := r.cfg.Now()
	grant, err := r.cfg.Etcd.Grant(ctx, int64(r.cfg.TTL.Round(time.Second)/time.Second))
	if err != nil {
		return shoal.Unavailable("etcd: lease for the node registry: %v", err)
	}
	revoke := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, _ = r.cfg.Etcd.Revoke(rctx, grant.ID)
		cancel()
	}
	entry := r.entry()
	r.mu.Lock()
	entry.Replace = r.cfg.Replace && r.gen == 0
	r.mu.Unlock()
	if err := r.cfg.Store.RegisterNode(ctx, entry, grant.ID); err != nil {
		revoke()
		return err
	}
	kctx, cancel := context.WithCancel(ctx)
	renew := make(chan time.Time, 1)
	g := &registration{lease: grant.ID, renew: renew, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(g.done); r.keepAlive(kctx, grant.ID, asked, renew) }()
	r.mu.Lock()
	r.current = g
	r.renewed = asked
	r.gen++
	r.mu.Unlock()
	return nil
}

// entry is this node's registry entry as it stands (conditions included).
func (r *Registry) entry() store.Registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return store.Registration{Node: proto.Clone(r.cfg.Node).(*shoalv1.Node), Instance: r.cfg.Instance}
}

// SetCondition sets one of the node's own conditions (see
// store.SetNodeCondition) and publishes it with the registration. A node
// not registered now keeps it and publishes it when it registers again;
// so does one whose write fails, which reports the error (the caller
// tries again later).
func (r *Registry) SetCondition(ctx context.Context, typ, status, reason, msg string) error {
	r.mu.Lock()
	store.SetNodeCondition(r.cfg.Node, typ, status, reason, msg)
	cur := r.current
	r.mu.Unlock()
	if cur == nil {
		return nil
	}
	err := r.cfg.Store.UpdateRegistration(ctx, r.entry(), cur.lease)
	if shoal.KindOf(err) == shoal.KindFailedPrecondition {
		return nil // lost meanwhile: Register publishes it
	}
	return err
}

// keepAlive renews lease every third of the TTL until ctx ends or the
// lease is gone, and sends on renew the time each accepted renewal was
// sent. etcd extends the lease from when the renewal reaches it, which is
// later: so by this node's clock the lease never outlives etcd's, however
// slow the round trip, and a node that freezes on it (agent/freeze.go)
// freezes no later than etcd expires it. (The client library's KeepAlive
// reports only when the answer came back, which errs late by the round
// trip: under a starved CPU that was enough for a host to run past the
// fence margin in a chaos soak.)
func (r *Registry) keepAlive(ctx context.Context, lease clientv3.LeaseID, granted time.Time, renew chan time.Time) {
	defer close(renew)
	every := r.cfg.TTL / 3
	last := granted
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := r.cfg.Now()
		left := last.Add(r.cfg.TTL).Sub(sent)
		if left <= 0 {
			return // lost by the clock: etcd has expired it by now
		}
		// A slow answer still counts while the lease may live: the call
		// may take what is left of it.
		cctx, cancel := context.WithTimeout(ctx, left)
		resp, err := r.cfg.Etcd.KeepAliveOnce(cctx, lease)
		cancel()
		if ctx.Err() == nil {
			r.cfg.Metrics.LeaseRenewal(err == nil && resp.TTL > 0, r.cfg.Now().Sub(sent))
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0:
			return // expired or revoked
		case err == nil:
			last = sent
			select {
			case <-renew: // the consumer has not read the older one: replace it
			default:
			}
			renew <- sent
		}
		// The next renewal a third of the TTL after this one was sent;
		// after a failure, soon.
		next := max(0, sent.Add(every).Sub(r.cfg.Now()))
		if err != nil {
			next = min(next, 100*time.Millisecond)
		}
		t.Reset(next)
	}
}

// Held reports whether the node holds its registration now: it is
// registered and its lease was renewed less than one TTL ago. A node that
// cannot reach etcd, or whose process was stopped, stops holding it when
// its TTL runs out, whether or not it has heard that its lease expired.
func (r *Registry) Held() bool {
	held, _ := r.State()
	return held
}

// State is Held and the registration's generation: the count of
// registrations, which moves when the node registers again after losing
// its lease (its sandboxes may have been deleted meanwhile).
func (r *Registry) State() (held bool, generation uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current != nil && r.cfg.Now().Sub(r.renewed) < r.cfg.TTL, r.gen
}

// Renewed is when, by this node's clock, the lease was last renewed: the
// send time of the newest renewal etcd accepted (or of the grant).
func (r *Registry) Renewed() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewed
}

// TTL is the liveness lease's TTL.
func (r *Registry) TTL() time.Duration { return r.cfg.TTL }

func (r *Registry) drop() *registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.current
	r.current = nil
	return cur
}

// Start keeps the registration until ctx ends: it records every renewal,
// and when the lease is lost (etcd unreachable past the TTL, or the process
// stopped for longer) it registers again as soon as it can. On a graceful
// stop it revokes the lease, so the node shows NotReady at once.
func (r *Registry) Start(ctx context.Context) error {
	for {
		r.mu.Lock()
		cur := r.current
		r.mu.Unlock()
		if cur == nil {
			return errors.New("registry: Start before Register")
		}
	renewing:
		for {
			select {
			case <-ctx.Done():
				// Graceful: give the key up now rather than after the TTL.
				cur := r.drop()
				cur.stop()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_, _ = r.cfg.Etcd.Revoke(rctx, cur.lease)
				cancel()
				return nil
			case sent, ok := <-cur.renew:
				if !ok {
					break renewing
				}
				r.mu.Lock()
				if sent.After(r.renewed) {
					r.renewed = sent
				}
				r.mu.Unlock()
			}
		}
		r.drop().stop()
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("node registration lease lost; registering again")
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			err := r.Register(ctx)
			if err == nil {
				r.log.Info("node registered again")
				break
			}
			if errors.Is(err, store.ErrNodeIDTaken) {
				// Another node took the id while this one was cut off
				// (live, or replacing this one): two nodes must never
				// share it.
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
	}
}
