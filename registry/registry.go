package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

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
}

// DefaultTTL is the liveness lease's TTL unless configured.
const DefaultTTL = 10 * time.Second

// Registry holds this node's registration.
type Registry struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	held  bool
	first chan struct{} // closed once registered the first time
	once  sync.Once
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
	return &Registry{cfg: cfg, log: cfg.Logger.With("subsystem", "registry"), first: make(chan struct{})}, nil
}

// Register takes this node's registry key once, synchronously, so that a
// second node with a live node's id fails at start with one clear line.
// Start keeps it afterwards.
func (r *Registry) Register(ctx context.Context) (*concurrency.Session, error) {
	sess, err := concurrency.NewSession(r.cfg.Etcd, concurrency.WithTTL(int(r.cfg.TTL.Round(time.Second)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, shoal.Unavailable("etcd: lease for the node registry: %v", err)
	}
	if err := r.cfg.Store.RegisterNode(ctx, store.Registration{Node: r.cfg.Node, Instance: r.cfg.Instance}, sess.Lease()); err != nil {
		sess.Orphan()
		_, _ = r.cfg.Etcd.Revoke(context.WithoutCancel(ctx), sess.Lease())
		return nil, err
	}
	r.set(true)
	r.once.Do(func() { close(r.first) })
	return sess, nil
}

// Held reports whether the node holds its registration now.
func (r *Registry) Held() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

func (r *Registry) set(v bool) {
	r.mu.Lock()
	r.held = v
	r.mu.Unlock()
}

// Start keeps the registration until ctx ends: when the lease is lost (etcd
// unreachable past the TTL) it registers again as soon as it can. On a
// graceful stop it revokes the lease, so the node shows NotReady at once.
// sess is the session of the first Register.
func (r *Registry) Start(ctx context.Context, sess *concurrency.Session) error {
	for {
		select {
		case <-ctx.Done():
			// Graceful: give the key up now rather than after the TTL.
			// (Session.Close would revoke under the ended ctx.)
			sess.Orphan()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_, _ = r.cfg.Etcd.Revoke(rctx, sess.Lease())
			cancel()
			r.set(false)
			return nil
		case <-sess.Done():
		}
		r.set(false)
		r.log.Warn("node registration lease lost; registering again")
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			var err error
			if sess, err = r.Register(ctx); err == nil {
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
