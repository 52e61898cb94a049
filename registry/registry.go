package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Config of a Registry.
type Config struct {
	Store *store.Store
	Etcd  *clientv3.Client
	// Node is this node's entry (name, address, labels, capacity, ...).
	Node *shoalv1.Node
	// Instance identifies this node's installation (see store.Registration).
	Instance string
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
	lease  clientv3.LeaseID
	renew  <-chan *clientv3.LeaseKeepAliveResponse
	cancel context.CancelFunc // stops the keep-alive
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
	if err := r.cfg.Store.RegisterNode(ctx, store.Registration{Node: r.cfg.Node, Instance: r.cfg.Instance}, grant.ID); err != nil {
		revoke()
		return err
	}
	kctx, cancel := context.WithCancel(ctx)
	renew, err := r.cfg.Etcd.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		revoke()
		return shoal.Unavailable("etcd: keep the node registry lease alive: %v", err)
	}
	r.mu.Lock()
	r.current = &registration{lease: grant.ID, renew: renew, cancel: cancel}
	r.renewed = asked
	r.gen++
	r.mu.Unlock()
	return nil
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
				cur.cancel()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_, _ = r.cfg.Etcd.Revoke(rctx, cur.lease)
				cancel()
				return nil
			case resp, ok := <-cur.renew:
				if !ok {
					break renewing
				}
				// The renewal was sent at most this long ago; counting it
				// from now errs late by one round trip, which the leader's
				// fence margin covers.
				if resp.TTL > 0 {
					r.mu.Lock()
					r.renewed = r.cfg.Now()
					r.mu.Unlock()
				}
			}
		}
		r.drop().cancel()
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
			if shoal.KindOf(err) == shoal.KindAlreadyExists {
				// Another node took the id while this one was cut off:
				// two nodes must never share it.
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
