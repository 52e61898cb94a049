package apiserver

import (
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/encryption"
	"shoal/pki"
	"shoal/store"
)

// ClusterConfig configures the Cluster service: the node registry
// (cluster_nodes.go) and the etcd members (cluster_members.go).
type ClusterConfig struct {
	Store *store.Store
	// Etcd is the node's etcd client; member calls go through it.
	Etcd *clientv3.Client
	// EtcdMember is the client URL of the node's embedded etcd member,
	// which Snapshot reads; empty on a node without one (then any member).
	EtcdMember string
	// Transport dials the member (mutual TLS, or plaintext when nil).
	Transport *pki.Transport
	// Keys is the node's key ring, for RotateEncryptionKey; nil: none.
	Keys *encryption.KeyRing
	// Events, if set, records the deletions a drain or a node removal
	// asks for.
	Events Events
	Logger *slog.Logger
}

// ClusterServer implements shoal.v1.Cluster. Every node serves it.
type ClusterServer struct {
	shoalv1.UnimplementedClusterServer
	cfg ClusterConfig
	log *slog.Logger
}

var _ shoalv1.ClusterServer = (*ClusterServer)(nil)

// NewCluster returns a ClusterServer.
func NewCluster(cfg ClusterConfig) *ClusterServer {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &ClusterServer{cfg: cfg, log: cfg.Logger.With("subsystem", "cluster-api")}
}
