package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"shoal"
	"shoal/agent"
	"shoal/apiserver"
	"shoal/connlimit"
	"shoal/docker"
	"shoal/events"
	"shoal/lease"
	"shoal/pki"
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
	// ReplaceNode lets this node take the id of a NotReady node of another
	// installation (another data dir): without it such a start is refused
	// (store.ErrNodeIDTaken) until that node is removed. The sandboxes
	// placed on the old node stay placed on the id: their containers are
	// on the old host's engine, not this one's, so they show ERROR here.
	ReplaceNode bool
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
	// MaxExecs caps the container streams (exec, sandbox cp, logs --follow) the API
	// serves at once; each holds a connection to the Docker engine.
	MaxExecs int
	// MaxStreamsPerClient caps the streams one client certificate holds
	// open on this node (mutual TLS only); 0: no cap.
	MaxStreamsPerClient int
	// MaxPendingConns caps the API's connections accepted and not yet past
	// their handshake (mutual TLS and the HTTP/2 preface; package
	// connlimit); MaxPendingConnsPerSource caps those of one address.
	// Beyond either a connection is closed at once. HandshakeTimeout closes
	// a connection still pending after it. Run lowers MaxPendingConns to
	// half the process's open-file limit if it is above.
	MaxPendingConns          int
	MaxPendingConnsPerSource int
	HandshakeTimeout         time.Duration
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
	// EngineGrace: a container engine that has not answered this long
	// makes the node publish EngineUnavailable (agent/engine.go). 0:
	// 2 × NodeTTL.
	EngineGrace time.Duration
	// EventTTL is how long the sandbox events this node records are kept
	// (package events; 0: events.DefaultTTL, an hour).
	EventTTL time.Duration
	// FenceMargin: while this node leads, a deletion of a sandbox whose
	// node is lost completes this long after the loss was recorded
	// (store/deletion.go). 0: NodeTTL.
	FenceMargin time.Duration
	// Version is reported in the node registry.
	Version string
	// ShutdownTimeout bounds the graceful part of shutdown.
	ShutdownTimeout time.Duration
	// DebugListen, if set, serves net/http/pprof there (loopback only
	// unless Insecure: it has no TLS): the soak test reads goroutine counts
	// from it.
	DebugListen string
	// Runtime is RuntimeDocker (the default) or RuntimeHollow: containers
	// simulated in memory (package hollow), for scale tests only; such a
	// node carries the label shoal.dev/runtime=hollow.
	Runtime string
	// HollowLatency is the hollow runtime's latency per container change.
	HollowLatency time.Duration
	// HollowEgress, with RuntimeHollow, enforces egress on the hollow
	// node as on a Docker one (a socket per sandbox with rules, the
	// node's proxy), with the sidecars simulated (hollow/egress.go): the
	// policy figure with 1,000 sandboxes on a node is measured on one.
	HollowEgress bool
	// WatchCache serves reads and client watches from a watch-fed copy of
	// sandboxes and providers (store/cache.go); off, every read goes to
	// etcd (for comparison and debugging).
	WatchCache bool
	// TLS: the node's certificate, its key and the cluster's CA. Set, the
	// API (clients and node-to-node forwarding), the embedded etcd's
	// client and peer URLs and the node's etcd client all use mutual TLS
	// with that CA, and the etcd URLs default to https. Unset, everything
	// is plaintext, and only loopback addresses are allowed (Insecure
	// lifts that).
	TLS pki.Files
	// SandboxLimits are the sandboxes' CPU and memory defaults, this
	// node's maximums and the pids cap (shoal.SandboxLimits).
	SandboxLimits shoal.SandboxLimits
	// SandboxNetwork is the network sandboxes get: docker.NetworkNone (the
	// default) or docker.NetworkBridge.
	SandboxNetwork string
	// EgressDir holds the unix sockets of the node's egress proxy, one
	// directory per sandbox with rules (agent.EgressConfig.Dir; default
	// DataDir/egress). EgressImage is the sidecar's image (default
	// docker.DefaultEgressImage).
	EgressDir   string
	EgressImage string
	// SandboxLogMaxBytes and SandboxLogFiles bound what the engine keeps
	// of each sandbox's output (docker.Config.LogMaxBytes, LogFiles).
	SandboxLogMaxBytes int64
	SandboxLogFiles    int
	// MetricsListen, if set, serves Prometheus metrics (/metrics) and the
	// health endpoints (/healthz, /readyz) there (package metrics).
	MetricsListen string
	// AuditLog, if set, is the file of the audit log (package audit),
	// rotated at AuditLogMaxBytes with AuditLogBackups kept.
	AuditLog         string
	AuditLogMaxBytes int64
	AuditLogBackups  int
	// EncryptionKeyFile, if set, is the key ring that encrypts provider
	// credentials at rest (package encryption); every node of a cluster
	// needs the same keys.
	EncryptionKeyFile string
	// OpenShellAPI serves OpenShell's gateway API (openshell.v1, package
	// openshellapi) beside shoal.v1, on the same listener (default on).
	OpenShellAPI bool
	// Insecure allows listening and advertising on non-loopback addresses
	// without TLS (a private test network; never the open one).
	Insecure bool
	// UnsafeNoFsync is for tests only.
	UnsafeNoFsync bool

	Logger *slog.Logger
	Tracer trace.TracerProvider
}

// The runtimes a node can run sandboxes on, and the node label that names
// a hollow node's.
const (
	RuntimeDocker = "docker"
	RuntimeHollow = "hollow"
	RuntimeLabel  = "shoal.dev/runtime"
)

// The bounds of --event-ttl: long enough to read what just happened, short
// enough that a busy cluster's history stays a small part of etcd.
const (
	MinEventTTL = time.Minute
	MaxEventTTL = 24 * time.Hour
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:7443"

// The embedded etcd member's default URLs (https with --tls-cert).
const (
	DefaultEtcdListenClient = "http://127.0.0.1:2379"
	DefaultEtcdListenPeer   = "http://127.0.0.1:2380"
)

// loopbackOnly refuses, without TLS, an address other hosts could reach:
// the API's listen and advertise addresses and the embedded member's URLs.
func (c *Config) loopbackOnly() error {
	const hint = "without TLS a node serves loopback only: give --tls-cert, --tls-key and --tls-ca (`shoal certs init` makes them), or --insecure on a private network"
	for _, a := range []struct{ flag, addr string }{{"listen", c.Listen}, {"advertise", c.Advertise}} {
		if a.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a.addr)
		if err == nil && !isLoopback(host) {
			return fmt.Errorf("--%s: %q is not a loopback address; %s", a.flag, a.addr, hint)
		}
	}
	if len(c.EtcdEndpoints) > 0 {
		return nil // no member of its own
	}
	for _, u := range []struct{ flag, url string }{
		{"etcd-listen-client", c.EtcdListenClient}, {"etcd-listen-peer", c.EtcdListenPeer},
		{"etcd-advertise-client", c.EtcdAdvertiseClient}, {"etcd-advertise-peer", c.EtcdAdvertisePeer},
	} {
		if u.url == "" {
			continue
		}
		if p, err := url.Parse(u.url); err == nil && p.Hostname() != "" && !isLoopback(p.Hostname()) {
			return fmt.Errorf("--%s: %q is not a loopback address; %s", u.flag, u.url, hint)
		}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DefaultConfig returns a single-node development configuration.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ID:                  sanitizeID(host),
		DataDir:             defaultDataDir(),
		EtcdListenClient:    DefaultEtcdListenClient,
		EtcdListenPeer:      DefaultEtcdListenPeer,
		Listen:              DefaultListen,
		Prefix:              store.DefaultPrefix,
		DefaultImage:        docker.DefaultImage,
		LeaseTTL:            lease.DefaultTTL,
		Resync:              10 * time.Second,
		OrphanGrace:         30 * time.Second,
		ShutdownTimeout:     10 * time.Second,
		MaxWatches:          apiserver.DefaultMaxWatches,
		MaxExecs:            apiserver.DefaultMaxExecs,
		MaxStreamsPerClient: apiserver.DefaultMaxStreamsPerClient,
		StartupWindow:       agent.DefaultStartupWindow,
		NodeTTL:             registry.DefaultTTL,
		EventTTL:            events.DefaultTTL,
		WatchCache:          true,
		OpenShellAPI:        true,
		Runtime:             RuntimeDocker,
		SandboxLimits:       shoal.DefaultSandboxLimits(),
		SandboxNetwork:      docker.NetworkNone,
		SandboxLogMaxBytes:  docker.DefaultLogMaxBytes,
		SandboxLogFiles:     docker.DefaultLogFiles,

		// The API's connections before their handshake (connlimit).
		MaxPendingConns:          connlimit.DefaultMaxPending,
		MaxPendingConnsPerSource: connlimit.DefaultMaxPendingPerSource,
		HandshakeTimeout:         connlimit.DefaultHandshakeTimeout,
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
	if err := c.TLS.Validate("--tls"); err != nil {
		return err
	}
	if c.TLS.Set() {
		// With TLS the member's default URLs are https (an explicit
		// http URL is refused by the member's config below).
		for _, u := range []*string{&c.EtcdListenClient, &c.EtcdListenPeer} {
			if strings.HasPrefix(*u, "http://") && (*u == DefaultEtcdListenClient || *u == DefaultEtcdListenPeer) {
				*u = "https://" + strings.TrimPrefix(*u, "http://")
			}
		}
	} else if !c.Insecure {
		if err := c.loopbackOnly(); err != nil {
			return err
		}
	}
	if c.DebugListen != "" && !c.Insecure {
		// pprof is plaintext and unauthenticated, with TLS or without.
		if host, _, err := net.SplitHostPort(c.DebugListen); err == nil && !isLoopback(host) {
			return fmt.Errorf("--debug-listen: %q is not a loopback address; pprof has no TLS and no roles, so it serves loopback only unless --insecure is given", c.DebugListen)
		}
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
	if c.EventTTL != 0 && (c.EventTTL < MinEventTTL || c.EventTTL > MaxEventTTL) {
		return fmt.Errorf("--event-ttl: %s is not between %s and %s", c.EventTTL, MinEventTTL, MaxEventTTL)
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
	switch c.Runtime {
	case "", RuntimeDocker:
		c.Runtime = RuntimeDocker
	case RuntimeHollow:
		if c.NodeLabels == nil {
			c.NodeLabels = map[string]string{}
		}
		c.NodeLabels[RuntimeLabel] = RuntimeHollow
	default:
		return fmt.Errorf("--runtime: %q is not one of %s, %s", c.Runtime, RuntimeDocker, RuntimeHollow)
	}
	if c.HollowLatency != 0 && c.Runtime != RuntimeHollow {
		return fmt.Errorf("--hollow-latency: only with --runtime %s", RuntimeHollow)
	}
	if c.HollowEgress && c.Runtime != RuntimeHollow {
		return fmt.Errorf("--hollow-egress: only with --runtime %s (a Docker node enforces egress with real sidecars)", RuntimeHollow)
	}
	if c.HollowLatency < 0 || c.HollowLatency > time.Minute {
		return fmt.Errorf("--hollow-latency: %s is out of range 0-1m", c.HollowLatency)
	}
	if c.AuditLogMaxBytes < 0 || c.AuditLogBackups < 0 {
		return fmt.Errorf("--audit-log-max-mib, --audit-log-backups: must not be negative")
	}
	if err := c.SandboxLimits.Validate(); err != nil {
		return err
	}
	switch c.SandboxNetwork {
	case "":
		c.SandboxNetwork = docker.NetworkNone
	case docker.NetworkNone, docker.NetworkBridge:
	default:
		return fmt.Errorf("--sandbox-network: %q is not %s or %s", c.SandboxNetwork, docker.NetworkNone, docker.NetworkBridge)
	}
	if c.SandboxLogMaxBytes < 1<<20 || c.SandboxLogFiles < 1 {
		return fmt.Errorf("--sandbox-log-max-mib, --sandbox-log-files: at least 1 MiB and 1 file (a sandbox's logs are always bounded); got %d bytes, %d files", c.SandboxLogMaxBytes, c.SandboxLogFiles)
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
	if c.EngineGrace < 0 {
		return fmt.Errorf("--engine-grace: %s; must not be negative (0: twice --node-ttl)", c.EngineGrace)
	}
	if c.MaxWatches <= 0 {
		return fmt.Errorf("--max-watches: %d; must be positive", c.MaxWatches)
	}
	if c.MaxStreamsPerClient < 0 {
		return fmt.Errorf("--max-streams-per-client: %d; must not be negative (0: no cap)", c.MaxStreamsPerClient)
	}
	if c.MaxExecs <= 0 {
		return fmt.Errorf("--max-execs: %d; must be positive", c.MaxExecs)
	}
	if c.MaxPendingConns <= 0 {
		return fmt.Errorf("--max-pending-conns: %d; must be positive", c.MaxPendingConns)
	}
	if c.MaxPendingConnsPerSource <= 0 {
		return fmt.Errorf("--max-pending-conns-per-source: %d; must be positive", c.MaxPendingConnsPerSource)
	}
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("--handshake-timeout: %s; must be positive", c.HandshakeTimeout)
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

// advertisedHosts are the hosts others dial this node at, by flag: its
// API, and a voter's etcd client and peer URLs. Its certificate must be
// valid for each.
func (c *Config) advertisedHosts() [][2]string {
	var out [][2]string
	if host, _, err := net.SplitHostPort(c.Advertise); err == nil {
		out = append(out, [2]string{"--advertise", host})
	} else if host, _, err := net.SplitHostPort(c.Listen); c.Advertise == "" && err == nil && host != "" && !unspecifiedHost(host) {
		out = append(out, [2]string{"--listen", host}) // advertised as it is
	}
	if len(c.EtcdEndpoints) > 0 {
		return out // a worker: no etcd member
	}
	for _, a := range []struct{ flag, url, listen string }{
		{"--etcd-advertise-client", c.EtcdAdvertiseClient, c.EtcdListenClient},
		{"--etcd-advertise-peer", c.EtcdAdvertisePeer, c.EtcdListenPeer}} {
		if a.url == "" {
			a.flag, a.url = strings.Replace(a.flag, "advertise", "listen", 1), a.listen // the default advertised URL
		}
		if u, err := url.Parse(a.url); err == nil && u.Hostname() != "" && !unspecifiedHost(u.Hostname()) {
			out = append(out, [2]string{a.flag, u.Hostname()})
		}
	}
	return out
}

func unspecifiedHost(h string) bool {
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}
