package embedetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal/etcdmember"
	"shoal/pki"
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
	// AdvertiseClient and AdvertisePeer are the URLs other members and
	// clients reach this member at; empty means the listen URLs.
	AdvertiseClient string
	AdvertisePeer   string
	// InitialCluster is etcd's --initial-cluster (name=peerURL,...). Empty
	// means this member alone. A member whose data dir is initialised
	// ignores it, as etcd does.
	InitialCluster string
	// InitialClusterState is etcd's --initial-cluster-state: ClusterNew
	// (the default) or ClusterExisting (a member added to a running cluster).
	InitialClusterState string
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
	// TLS, when set, serves the client and peer URLs with mutual TLS: the
	// member presents TLS.Cert and requires clients and peers to present
	// a certificate signed by TLS.CA. The URLs must then be https.
	TLS pki.Files
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

// Values of Config.InitialClusterState, as etcd spells them.
const (
	ClusterNew      = "new"
	ClusterExisting = "existing"
)

// initialClusterToken is etcd's default, written down so that a restore
// (restore.go) makes the same cluster as a bootstrap.
const initialClusterToken = "etcd-cluster"

// Validate reports the first bad field, named by its shoal flag without
// the dashes (the caller adds them).
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("etcd data dir: must be set")
	}
	if err := etcdmember.CheckName(c.Name); err != nil {
		return fmt.Errorf("node-id: %w (the node id names the etcd member)", err)
	}
	if err := etcdmember.CheckURL("etcd-listen-client", c.ListenClient); err != nil {
		return err
	}
	if err := etcdmember.CheckURL("etcd-listen-peer", c.ListenPeer); err != nil {
		return err
	}
	for _, u := range []struct{ field, url string }{
		{"etcd-listen-client", c.ListenClient}, {"etcd-listen-peer", c.ListenPeer},
		{"etcd-advertise-client", c.AdvertiseClient}, {"etcd-advertise-peer", c.AdvertisePeer},
	} {
		if u.url == "" {
			continue
		}
		secure := strings.HasPrefix(u.url, "https://")
		switch {
		case c.TLS.Set() && !secure:
			return fmt.Errorf("%s: %q must be https:// with --tls-cert (the member serves mutual TLS)", u.field, u.url)
		case !c.TLS.Set() && secure:
			return fmt.Errorf("%s: %q is https:// but no --tls-cert, --tls-key and --tls-ca are given", u.field, u.url)
		}
	}
	if err := c.TLS.Validate("--tls"); err != nil {
		return err
	}
	if err := checkAdvertise("etcd-advertise-client", c.AdvertiseClient, "etcd-listen-client", c.ListenClient); err != nil {
		return err
	}
	if err := checkAdvertise("etcd-advertise-peer", c.AdvertisePeer, "etcd-listen-peer", c.ListenPeer); err != nil {
		return err
	}
	switch c.InitialClusterState {
	case "", ClusterNew, ClusterExisting:
	default:
		return fmt.Errorf("etcd-initial-cluster-state: %q is not %s or %s", c.InitialClusterState, ClusterNew, ClusterExisting)
	}
	if c.InitialCluster == "" {
		return nil
	}
	ic, err := etcdmember.ParseInitialCluster(c.InitialCluster)
	if err != nil {
		return fmt.Errorf("etcd-initial-cluster: %w", err)
	}
	own := ic.URLs(c.Name)
	if len(own) == 0 {
		return fmt.Errorf("etcd-initial-cluster: this member's name %q is not in %q (the member name is the node id)", c.Name, c.InitialCluster)
	}
	if adv := etcdmember.Normalize(c.advertisePeer()); len(own) != 1 || own[0] != adv {
		return fmt.Errorf("etcd-initial-cluster: %s=%s does not match this member's peer URL %s (--etcd-advertise-peer, default --etcd-listen-peer)",
			c.Name, own[0], adv)
	}
	return nil
}

func (c Config) advertiseClient() string { return orDefault(c.AdvertiseClient, c.ListenClient) }
func (c Config) advertisePeer() string   { return orDefault(c.AdvertisePeer, c.ListenPeer) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkAdvertise checks an advertise URL, or the listen URL it defaults
// to: others must be able to dial it, so an unspecified address (0.0.0.0,
// ::) will not do.
func checkAdvertise(field, u, listenField, listen string) error {
	if u == "" {
		if etcdmember.Unspecified(listen) {
			return fmt.Errorf("%s: must be set when --%s listens on every address (%s): give the URL other members and clients dial", field, listenField, listen)
		}
		return nil
	}
	if err := etcdmember.CheckURL(field, u); err != nil {
		return err
	}
	if etcdmember.Unspecified(u) {
		return fmt.Errorf("%s: %q is an unspecified address; give the URL other members and clients dial", field, u)
	}
	return nil
}

// Initialized reports whether dataDir holds a member already (its WAL), in
// which case etcd ignores the initial-cluster settings and the member
// rejoins its cluster as itself.
func Initialized(dataDir string) bool {
	return wal.Exist(filepath.Join(dataDir, "member", "wal"))
}

// ErrRemoved reports that the member was removed from its cluster: its data
// dir can no longer start, and it stops.
var ErrRemoved = errors.New("this etcd member was removed from the cluster")

// Server is a running embedded etcd.
type Server struct {
	e   *embed.Etcd
	cfg Config

	errc      chan error
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
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
	acu, _ := url.Parse(cfg.advertiseClient())
	apu, _ := url.Parse(cfg.advertisePeer())
	ec.ListenClientUrls = []url.URL{*cu}
	ec.AdvertiseClientUrls = []url.URL{*acu}
	ec.ListenPeerUrls = []url.URL{*pu}
	ec.AdvertisePeerUrls = []url.URL{*apu}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	}
	ec.ClusterState = orDefault(cfg.InitialClusterState, ClusterNew)
	ec.InitialClusterToken = initialClusterToken
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
	if cfg.TLS.Set() {
		// Only node certificates: any other certificate of the CA (a
		// viewer's) would otherwise read and write etcd past the roles.
		info := transport.TLSInfo{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, TrustedCAFile: cfg.TLS.CA, ClientCertAuth: true,
			AllowedHostnames: []string{pki.NodeName}}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
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
	// A member of a cluster is ready once it has published itself through
	// raft, which needs a quorum: with peers still starting, this waits
	// for them.
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		// A removed member's server stops with an error too: say which.
		removed := wasRemoved(context.Background(), e, cfg)
		e.Close()
		if removed {
			return nil, ErrRemoved
		}
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-e.Server.StopNotify():
		removed := wasRemoved(context.Background(), e, cfg)
		e.Close()
		if removed {
			return nil, ErrRemoved
		}
		return nil, fmt.Errorf("embedded etcd in %s stopped while starting", cfg.DataDir)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within %s (with --etcd-initial-cluster, a quorum of the members must be up)", cfg.DataDir, timeout)
	}
	s := &Server{e: e, cfg: cfg, errc: make(chan error, 1), closing: make(chan struct{})}
	s.wg.Add(1)
	go s.watch()
	return s, nil
}

// watch reports the member's end, unless Close caused it: a fatal serve
// error, or the server stopping on its own (etcd stops a member that was
// removed from its cluster).
func (s *Server) watch() {
	defer s.wg.Done()
	var err error
	select {
	case <-s.closing:
		return
	case err = <-s.e.Err():
	case <-s.e.Server.StopNotify():
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		err = errors.New("the member stopped")
		if wasRemoved(ctx, s.e, s.cfg) {
			err = ErrRemoved
		}
		cancel()
	}
	select {
	case <-s.closing:
	case s.errc <- err:
	}
}

// wasRemoved tells whether a member that stopped on its own was removed
// from its cluster. It may have applied its own removal; more often its
// peers refused it (HTTP 410) before it could, and etcd keeps that reason
// to itself, so the other voters are asked whether it is still a member.
func wasRemoved(ctx context.Context, e *embed.Etcd, cfg Config) bool {
	id := e.Server.MemberID()
	if e.Server.IsIDRemoved(uint64(id)) {
		return true
	}
	var eps []string
	for _, m := range e.Server.Cluster().Members() {
		if m.ID != id && !m.IsLearner {
			eps = append(eps, m.ClientURLs...)
		}
	}
	if len(eps) == 0 {
		return false
	}
	tc, err := cfg.clientTLS()
	if err != nil {
		return false
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		return false
	}
	for _, m := range resp.Members {
		if m.ID == uint64(id) {
			return false
		}
	}
	return true
}

// Endpoint is the client URL to dial.
func (s *Server) Endpoint() string { return s.e.Clients[0].Addr().String() }

// ClientURL is the member's advertised client URL.
func (s *Server) ClientURL() string { return s.cfg.advertiseClient() }

// OwnURL is where this process dials its own member. With TLS, the
// advertised client URL: the certificate is checked to cover it (a node
// refuses to start otherwise), while the listen address may name no host
// it can be valid for (0.0.0.0, ::). Plaintext, the bound listen address:
// no name to resolve, no way round through a NAT.
func (s *Server) OwnURL() string {
	if s.cfg.TLS.Set() {
		if u, err := url.Parse(s.ClientURL()); err == nil && u.Port() != "0" {
			return s.ClientURL()
		}
	}
	return s.Endpoint()
}

// PeerURL is the member's advertised peer URL.
func (s *Server) PeerURL() string { return s.cfg.advertisePeer() }

// ID is the member's id in its cluster.
func (s *Server) ID() uint64 { return uint64(s.e.Server.MemberID()) }

// IsLearner reports whether the member is a learner now (it replicates
// but neither votes nor serves most client requests).
func (s *Server) IsLearner() bool { return s.e.Server.IsLearner() }

// ModRevision is the mod revision of key as of now, read through this
// member in process: linearizable (the member confirms with the cluster's
// leader that it has applied everything committed before the call, as a
// client's read does), without a client's gRPC round trip to the member
// (a tenth of its time here: docs/benchmarks.md). ok is false when the
// key does not exist. A learner does not serve it (ErrLearner): read
// through a client then.
func (s *Server) ModRevision(ctx context.Context, key string) (rev int64, ok bool, err error) {
	if s.e.Server.IsLearner() {
		return 0, false, ErrLearner
	}
	resp, err := s.e.Server.Range(ctx, &pb.RangeRequest{Key: []byte(key), KeysOnly: true})
	if err != nil {
		return 0, false, err
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	return resp.Kvs[0].ModRevision, true, nil
}

// ErrLearner: a learner member does not serve linearizable reads.
var ErrLearner = errors.New("etcd: a learner member does not serve linearizable reads")

// AppliedIndex is the last raft index the member applied.
func (s *Server) AppliedIndex() uint64 { return s.e.Server.AppliedIndex() }

// VoterClientURLs are the client URLs of the cluster's voting members as
// this member knows them, its own (OwnURL, as Client dials it) first
// when it votes. A client that knows them all survives the loss of any
// one member; learners are left out, since they refuse most requests.
// Right after a start, members that have not yet published their URLs
// are missing: a DialMembers client learns them at its first auto-sync.
func (s *Server) VoterClientURLs() []string {
	var own, others []string
	for _, m := range s.e.Server.Cluster().Members() {
		if m.IsLearner {
			continue
		}
		if m.ID == s.e.Server.MemberID() {
			own = append(own, s.OwnURL())
			continue
		}
		others = append(others, m.ClientURLs...)
	}
	return append(own, others...)
}

// Err reports a fatal error of the member, or that it stopped on its own
// (ErrRemoved when it was removed from the cluster).
func (s *Server) Err() <-chan error { return s.errc }

// Client dials the member (with its own certificate when it serves TLS)
// at OwnURL.
func (s *Server) Client() (*clientv3.Client, error) {
	tc, err := s.cfg.clientTLS()
	if err != nil {
		return nil, err
	}
	return Dial([]string{s.OwnURL()}, WithTLS(tc))
}

// clientTLS is the member's own certificate as a client's, nil without TLS.
func (c Config) clientTLS() (*tls.Config, error) {
	if !c.TLS.Set() {
		return nil, nil
	}
	return c.TLS.ClientConfig()
}

// Close stops the member and waits for it.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.e.Close()
		s.wg.Wait()
	})
}

// DialOption changes how Dial and DialMembers connect.
type DialOption func(*clientv3.Config)

// WithTLS connects with TLS (a client certificate for mutual TLS, the CA
// to verify the members by); nil leaves the connection plaintext.
func WithTLS(tc *tls.Config) DialOption {
	return func(c *clientv3.Config) { c.TLS = tc }
}

// Dial connects to etcd endpoints with shoal's client settings.
func Dial(endpoints []string, opts ...DialOption) (*clientv3.Client, error) {
	return dial(endpoints, 0, opts)
}

// MemberSyncInterval is how often a DialMembers client refreshes its
// endpoints from the member list.
const MemberSyncInterval = 30 * time.Second

// DialMembers connects like Dial, and keeps the endpoints in step with the
// cluster's member list (clientv3's auto-sync: voters' client URLs), so
// that members added later are used and removed ones dropped. It is for
// shoal's own members, whose advertised client URLs are reachable; an
// external etcd may sit behind addresses its member list does not show.
func DialMembers(endpoints []string, opts ...DialOption) (*clientv3.Client, error) {
	return dial(endpoints, MemberSyncInterval, opts)
}

func dial(endpoints []string, autoSync time.Duration, opts []DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		// A member that stops answering (its host frozen or cut off)
		// must leave the client's pool within seconds: without
		// keepalives its open connection looks healthy and calls hang
		// on it. 5s is the least etcd's server accepts by default
		// (--grpc-keepalive-min-time).
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		AutoSyncInterval:     autoSync,
		Logger:               zap.NewNop(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	// Any one endpoint answering will do: the client balances over all
	// of them, and a cluster with one member down still serves.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	unreachable := true
	for _, ep := range endpoints {
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.Status(sctx, ep)
		scancel()
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
		code := status.Code(err)
		unreachable = unreachable && (errors.Is(err, context.DeadlineExceeded) || code == codes.DeadlineExceeded || code == codes.Unavailable)
		if ctx.Err() != nil {
			break
		}
	}
	c.Close()
	err = fmt.Errorf("etcd %v is not reachable: %w", endpoints, errors.Join(errs...))
	if unreachable {
		err = fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return nil, err
}

// ErrUnreachable marks a dial that failed only because no endpoint
// answered in time or accepted a connection (not, say, a TLS refusal): a
// caller may try again later.
var ErrUnreachable = errors.New("no etcd endpoint answers")
