package hosts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"shoal/docker"
)

// DefaultImage is the tag of the node image Start builds from the binary.
const DefaultImage = "shoal/node:chaos"

// Config shapes a cluster of hosts. DefaultConfig fills it; Validate
// checks it (Start calls both: a zero field takes its default).
type Config struct {
	// Voters run an embedded etcd member each and form the etcd cluster
	// with --etcd-initial-cluster (default 3).
	Voters int
	// Workers are etcd clients only (--etcd-endpoints: the voters).
	Workers int
	// Binary is the shoal binary; the nodes run the shoal-node beside it
	// (make build puts it there), which must be static: the node image is
	// FROM scratch.
	Binary string
	// Image is the node image's tag (default DefaultImage). It is built
	// at Start unless an image of that tag already holds this binary.
	Image string
	// SandboxImages are copied from the system engine into every private
	// engine (default: docker.DefaultImage).
	SandboxImages []string

	// Node timings, passed as flags: --lease-ttl, --node-ttl,
	// --fence-margin (0: the node's default, one node TTL), --resync,
	// --orphan-grace. Short by default, so that faults heal fast.
	LeaseTTL    time.Duration
	NodeTTL     time.Duration
	FenceMargin time.Duration
	Resync      time.Duration
	OrphanGrace time.Duration
	// Args are extra `shoal node start` flags for every node, after the
	// ones Start sets (a repeated flag takes the last value).
	Args []string
	// Env is extra environment (KEY=VALUE) for every node process, for
	// test-only switches.
	Env []string

	// Dir holds the nodes' data dirs (bind-mounted, so a killed node
	// restarts on its data) and, with KeepDir, their logs after Close.
	// Default: a new temporary directory. Close removes it unless KeepDir.
	Dir     string
	KeepDir bool

	// SharedEngine puts every node on the system Docker engine, as when
	// private engines cannot run. RequireEngines makes that fallback an
	// error instead (it does not apply when SharedEngine asks for it).
	SharedEngine   bool
	RequireEngines bool

	// DockerSocket, if set, is called once per node before its container
	// is first made. It returns the path on this machine of the unix
	// socket the node is to use as its Docker engine: a fault proxy in
	// front of n.EngineSocket, say. The node container mounts the
	// socket's directory (not the file), so that a proxy restarted on the
	// same path is seen by the node; keep that directory for this one
	// socket. The proxy is the caller's: keep it serving until Close
	// returns. Without it the node gets its engine's socket.
	DockerSocket func(ctx context.Context, n NodeInfo) (string, error)

	// Logf hears of progress and of fallbacks (default: nothing).
	Logf func(format string, args ...any)
}

// NodeInfo describes a node to Config.DockerSocket.
type NodeInfo struct {
	Index int
	ID    string
	// EngineSocket is the path on this machine of the node's engine's
	// API socket (the system engine's when engines are shared).
	EngineSocket string
}

// Defaults of DefaultConfig.
const (
	DefaultVoters      = 3
	DefaultLeaseTTL    = 3 * time.Second
	DefaultNodeTTL     = 3 * time.Second
	DefaultResync      = 500 * time.Millisecond
	DefaultOrphanGrace = 2 * time.Second
)

// DefaultConfig is three voters running binary with short timings.
func DefaultConfig(binary string) Config {
	var c Config
	c.Binary = binary
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Voters == 0 {
		c.Voters = DefaultVoters
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if len(c.SandboxImages) == 0 {
		c.SandboxImages = []string{docker.DefaultImage}
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.NodeTTL == 0 {
		c.NodeTTL = DefaultNodeTTL
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Validate reports what is wrong with c, naming the field.
func (c Config) Validate() error {
	var errs []error
	if c.Voters < 1 {
		errs = append(errs, fmt.Errorf("hosts: Voters=%d: want at least 1", c.Voters))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("hosts: Workers=%d: want 0 or more", c.Workers))
	}
	if c.Voters+c.Workers > maxNodes/2 {
		errs = append(errs, fmt.Errorf("hosts: %d nodes: at most %d (replacements need addresses too)", c.Voters+c.Workers, maxNodes/2))
	}
	if c.Binary == "" {
		errs = append(errs, errors.New("hosts: Binary: the shoal binary's path is required"))
	} else if !filepath.IsAbs(c.Binary) {
		errs = append(errs, fmt.Errorf("hosts: Binary %q: want an absolute path", c.Binary))
	}
	for name, d := range map[string]time.Duration{"LeaseTTL": c.LeaseTTL, "NodeTTL": c.NodeTTL} {
		if d < time.Second {
			errs = append(errs, fmt.Errorf("hosts: %s=%s: the node's minimum is 1s", name, d))
		}
	}
	if c.FenceMargin < 0 || c.Resync <= 0 || c.OrphanGrace <= 0 {
		errs = append(errs, fmt.Errorf("hosts: FenceMargin=%s, Resync=%s, OrphanGrace=%s: want FenceMargin >= 0 and the others > 0", c.FenceMargin, c.Resync, c.OrphanGrace))
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("hosts: Env %q: want KEY=VALUE", kv))
		}
	}
	return errors.Join(errs...)
}
