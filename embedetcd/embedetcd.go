package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config for an embedded etcd member.
type Config struct {
	Name string
	// DataDir holds the member's WAL and snapshots.
	DataDir string
	// ListenClient is the client URL, default http://127.0.0.1:2379.
	ListenClient string
	// ListenPeer is the peer URL, default http://127.0.0.1:2380.
	ListenPeer string
	// AutoCompactionRetention keeps this much history for watches; default 1h.
	AutoCompactionRetention time.Duration
	// StartTimeout bounds how long Start waits for the member to serve.
	StartTimeout time.Duration
	// MaxRequestBytes is the member's --max-request-bytes. shoal's
	// store sizes its objects for it (store.MinEtcdRequestBytes).
	MaxRequestBytes uint
	// MaxTxnOps is the member's --max-txn-ops (store.MinEtcdTxnOps).
	MaxTxnOps uint
	// UnsafeNoFsync skips fsync: for tests only, where a crash loses nothing
	// that matters.
	UnsafeNoFsync bool
}

// DefaultConfig returns the defaults for a data dir.
func DefaultConfig(dataDir string) Config {
	return Config{
		Name:                    "shoal",
		DataDir:                 dataDir,
		ListenClient:            "http://127.0.0.1:2379",
		ListenPeer:              "http://127.0.0.1:2380",
		AutoCompactionRetention: time.Hour,
		StartTimeout:            60 * time.Second,
		MaxRequestBytes:         MaxRequestBytes,
		MaxTxnOps:               MaxTxnOps,
	}
}

// MaxRequestBytes is etcd's own default request limit, set explicitly so
// that the size budget the store relies on does not move with etcd's
// defaults.
const MaxRequestBytes = 3 << 19 // 1.5 MiB

// MaxTxnOps is etcd's default op limit per Txn branch, set explicitly for
// the same reason.
const MaxTxnOps = 128

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("etcd data dir: must be set")
	}
	for field, u := range map[string]string{"etcd-listen-client": c.ListenClient, "etcd-listen-peer": c.ListenPeer} {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") {
			return fmt.Errorf("%s: %q is not a URL like http://127.0.0.1:2379", field, u)
		}
	}
	return nil
}

// Server is a running embedded etcd.
type Server struct {
	e   *embed.Etcd
	cfg Config
}

// Start starts the member and waits until it serves clients.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cu, _ := url.Parse(cfg.ListenClient)
	pu, _ := url.Parse(cfg.ListenPeer)
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*cu}
	ec.AdvertiseClientUrls = []url.URL{*cu}
	ec.ListenPeerUrls = []url.URL{*pu}
	ec.AdvertisePeerUrls = []url.URL{*pu}
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.AutoCompactionRetention.String()
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.MaxRequestBytes = cfg.MaxRequestBytes
	if ec.MaxRequestBytes == 0 {
		ec.MaxRequestBytes = MaxRequestBytes
	}
	ec.MaxTxnOps = cfg.MaxTxnOps
	if ec.MaxTxnOps == 0 {
		ec.MaxTxnOps = MaxTxnOps
	}
	ec.LogLevel = "error"
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Metrics and pprof listeners stay off; the client port is the only one.
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", cfg.DataDir, err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within %s", cfg.DataDir, timeout)
	}
	return &Server{e: e, cfg: cfg}, nil
}

// Endpoint is the client URL to dial.
func (s *Server) Endpoint() string { return s.e.Clients[0].Addr().String() }

// Err reports a fatal server error.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Client dials the member.
func (s *Server) Client() (*clientv3.Client, error) {
	return Dial([]string{s.Endpoint()})
}

// Close stops the member and waits for it.
func (s *Server) Close() { s.e.Close() }

// Dial connects to etcd endpoints with shoal's client settings.
func Dial(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Status(ctx, endpoints[0]); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd %v is not reachable: %w", endpoints, err)
	}
	return c, nil
}
