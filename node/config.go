package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"shoal/agent"
	"shoal/apiserver"
	"shoal/docker"
	"shoal/lease"
	"shoal/registry"
	"shoal/store"
)

// Config of a node. DefaultConfig fills every field; flags override.
type Config struct {
	// ID names this node in sandbox status, container labels and the
	// leader election. Default: the host name.
	ID string
	// DataDir holds the embedded etcd's data. Default: $XDG_DATA_HOME/shoal
	// or ~/.local/share/shoal.
	DataDir string
	// EtcdEndpoints, when set, uses an external etcd instead of embedding one.
	EtcdEndpoints []string
	// EtcdListenClient and EtcdListenPeer are the embedded etcd's URLs.
	EtcdListenClient string
	EtcdListenPeer   string
	// The embedded member's place in an etcd cluster (membership.go).
	// EtcdAdvertiseClient and EtcdAdvertisePeer default to the listen URLs.
	EtcdAdvertiseClient string
	EtcdAdvertisePeer   string
	// EtcdInitialCluster is etcd's --initial-cluster (name=peerURL,...,
	// the same on every voter of a static bootstrap); empty: this member
	// alone. EtcdInitialClusterState is "new" (default) or "existing".
	EtcdInitialCluster      string
	EtcdInitialClusterState string
	// Join is the API address of a node of a running cluster: this node's
	// member joins it as a learner and is promoted once caught up.
	Join string
	// Listen is the gRPC API address.
	Listen string
	// DockerHost is the Docker engine address; empty means DOCKER_HOST or
	// the default socket.
	DockerHost string
	// Prefix is the etcd key prefix.
	Prefix       string
	DefaultImage string
	LeaseTTL     time.Duration
	Resync       time.Duration
	OrphanGrace  time.Duration
	// MaxWatches caps the watch streams the API serves at once (each holds
	// an etcd watch and goroutines); beyond it a watch is refused with
	// RESOURCE_EXHAUSTED.
	MaxWatches int
	// MaxExecs caps the container streams (exec, logs --follow) the API
	// serves at once; each holds a connection to the Docker engine.
	MaxExecs int
	// StartupWindow: see agent.Config.StartupWindow.
	StartupWindow time.Duration
	// Advertise is the API address other nodes and clients use to reach
	// this node; default: Listen. An unspecified host (0.0.0.0, ::) is
	// refused.
	Advertise string
	// NodeLabels are matched by sandboxes' node selectors.
	NodeLabels map[string]string
	// MaxSandboxes caps the sandboxes placed on this node; 0: no cap.
	MaxSandboxes int
	// NodeTTL is the liveness lease of the node's registry entry.
	NodeTTL time.Duration
	// FenceMargin: while this node leads, a deletion of a sandbox whose
	// node is lost completes this long after the loss was recorded
	// (store/deletion.go). 0: NodeTTL.
	FenceMargin time.Duration
	// Version is reported in the node registry.
	Version string
	// ShutdownTimeout bounds the graceful part of shutdown.
	ShutdownTimeout time.Duration
	// DebugListen, if set, serves net/http/pprof there (loopback only
	// unless told otherwise): the soak test reads goroutine counts from it.
	DebugListen string
	// UnsafeNoFsync is for tests only.
	UnsafeNoFsync bool

	Logger *slog.Logger
	Tracer trace.TracerProvider
}

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:7443"

// DefaultConfig returns a single-node development configuration.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ID:               sanitizeID(host),
		DataDir:          defaultDataDir(),
		EtcdListenClient: "http://127.0.0.1:2379",
		EtcdListenPeer:   "http://127.0.0.1:2380",
		Listen:           DefaultListen,
		Prefix:           store.DefaultPrefix,
		DefaultImage:     docker.DefaultImage,
		LeaseTTL:         lease.DefaultTTL,
		Resync:           10 * time.Second,
		OrphanGrace:      30 * time.Second,
		ShutdownTimeout:  10 * time.Second,
		MaxWatches:       apiserver.DefaultMaxWatches,
		MaxExecs:         apiserver.DefaultMaxExecs,
		StartupWindow:    agent.DefaultStartupWindow,
		NodeTTL:          registry.DefaultTTL,
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "shoal")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "shoal")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("shoal-%d", os.Getuid()))
}

func sanitizeID(s string) string {
	s = strings.ToLower(s)
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	id := strings.Trim(string(b), "-")
	if len(id) > 63 {
		id = strings.Trim(id[:63], "-")
	}
	if id == "" {
		return "node"
	}
	return id
}

// Validate reports the first bad field by its flag name.
func (c *Config) Validate() error {
	if c.ID == "" {
		return errors.New("--node-id: must be set")
	}
	if !store.IsName(c.ID) {
		return fmt.Errorf("--node-id: %q must be 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit", c.ID)
	}
	if err := c.validateMembership(); err != nil {
		return err
	}
	if len(c.EtcdEndpoints) == 0 {
		if c.DataDir == "" {
			return errors.New("--data-dir: must be set when etcd is embedded")
		}
		ec := c.etcdConfig()
		if err := ec.Validate(); err != nil {
			return fmt.Errorf("--%w", err)
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen: %q is not host:port: %v", c.Listen, err)
	}
	if !strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("--prefix: %q must start with '/' and not end with one", c.Prefix)
	}
	if c.NodeTTL < time.Second {
		return fmt.Errorf("--node-ttl: %s is below the 1s minimum", c.NodeTTL)
	}
	if c.FenceMargin < 0 {
		return fmt.Errorf("--fence-margin: %s is negative (0: one --node-ttl)", c.FenceMargin)
	}
	if c.MaxSandboxes < 0 {
		return fmt.Errorf("--max-sandboxes: %d is negative (0: no cap)", c.MaxSandboxes)
	}
	if c.Advertise != "" {
		host, port, err := net.SplitHostPort(c.Advertise)
		if err != nil || port == "" || port == "0" {
			return fmt.Errorf("--advertise: %q is not host:port", c.Advertise)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--advertise: %q is an unspecified address; give the address others reach this node at", c.Advertise)
		}
	}
	for k, v := range c.NodeLabels {
		if k == "" || strings.ContainsAny(k+v, "=,\x00") {
			return fmt.Errorf("--node-label: %q=%q is not a label", k, v)
		}
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("--lease-ttl: %s is below the 1s minimum", c.LeaseTTL)
	}
	if c.Resync <= 0 {
		return fmt.Errorf("--resync: must be positive")
	}
	if c.OrphanGrace <= 0 {
		return fmt.Errorf("--orphan-grace: must be positive")
	}
	if c.MaxWatches <= 0 {
		return fmt.Errorf("--max-watches: %d; must be positive", c.MaxWatches)
	}
	if c.MaxExecs <= 0 {
		return fmt.Errorf("--max-execs: %d; must be positive", c.MaxExecs)
	}
	if c.StartupWindow < 0 {
		return fmt.Errorf("startup window: must not be negative")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	return nil
}
