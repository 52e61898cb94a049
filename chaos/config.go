package chaos

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Config of a chaos run. DefaultConfig fills it; flags override.
type Config struct {
	// Scenarios to run, in order ("all" expands to every scenario).
	Scenarios []string
	// Duration of traffic per run, split across the scenarios.
	Duration time.Duration
	Seed     int64
	Clients  int
	// ReportDir receives report.json, summary.txt, history.json and, on a
	// linearizability failure, porcupine's HTML visualisation.
	ReportDir string
	// DeletingBound: after faults heal, no sandbox may stay DELETING longer.
	DeletingBound time.Duration
	// OpTimeout bounds every client call of the traffic (a lifecycle's
	// wait-delete gets twice as long); a call that times out is recorded
	// as ambiguous. Default 20s (also when zero).
	OpTimeout time.Duration
	// CheckTimeout bounds the linearizability check of one sandbox's
	// history (porcupine's search); a check that runs out is reported
	// inconclusive. Default 30s (also when zero). A checker built with
	// -race (the chaos package's own tests) needs several times longer.
	CheckTimeout time.Duration

	// Cluster, if above 0, starts that many voters as separate hosts
	// (package chaos/hosts), plus Workers workers; 0 runs one node.
	Cluster int
	Workers int

	// Endpoint of existing nodes (comma-separated); empty starts them
	// (Binary).
	Endpoint      string
	EtcdEndpoints []string
	NodeID        string
	Prefix        string
	// Binary is the shoal executable that runs the node (and, with
	// Cluster, is copied into the hosts' image). DefaultConfig leaves it
	// empty: the running program is shoal-lab or a test, never shoal;
	// shoal-lab sets it (--shoal-binary, else shoal beside it or on PATH).
	Binary string
	// NodeEnv is added to the node's environment (test-only switches).
	NodeEnv []string
	// KeepData keeps the run's temp dir (etcd data, node log).
	KeepData bool

	// Progress is where a TTY progress bar goes (nil: none).
	Progress io.Writer
	// Log receives plain progress lines (nil: none).
	Log io.Writer
}

// DefaultConfig returns the defaults of `shoal-lab chaos run`, but for
// Binary, which the caller sets.
func DefaultConfig() Config {
	return Config{
		Scenarios:     []string{"all"},
		Duration:      time.Minute,
		Seed:          time.Now().UnixNano() % 1_000_000,
		Clients:       8,
		ReportDir:     "chaos-report",
		DeletingBound: 30 * time.Second,
		OpTimeout:     20 * time.Second,
		CheckTimeout:  30 * time.Second,
		Prefix:        "/shoal",
	}
}

// Validate checks the config and expands "all".
func (c *Config) Validate() error {
	var out []string
	if c.Cluster != 0 && c.Cluster < 3 {
		return fmt.Errorf("--cluster: %d voters; a cluster under test has at least 3 (0: one node)", c.Cluster)
	}
	if c.Cluster > 7 {
		return fmt.Errorf("--cluster: %d voters is more than 7", c.Cluster)
	}
	if c.Workers < 0 || c.Workers > 8 {
		return fmt.Errorf("--workers: %d is out of range 0-8", c.Workers)
	}
	if c.Workers > 0 && c.Cluster == 0 {
		return errors.New("--workers: needs --cluster N (workers join a cluster of voters)")
	}
	if c.Cluster > 0 && c.Endpoint != "" {
		return errors.New("--cluster starts its own hosts; it cannot be combined with --endpoint")
	}
	for _, s := range c.Scenarios {
		if s == "all" {
			// Every scenario the system under test can run.
			for _, n := range ScenarioNames() {
				if !scenarios[n].needsCluster || c.Cluster > 0 {
					out = append(out, n)
				}
			}
			continue
		}
		sc, ok := scenarios[s]
		if !ok {
			return fmt.Errorf("--scenario: %q is not one of %s, all", s, strings.Join(ScenarioNames(), ", "))
		}
		if sc.needsCluster && c.Cluster == 0 {
			return fmt.Errorf("--scenario %s acts on the hosts of a cluster: add --cluster 3 (or more)", s)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return errors.New("--scenario: name at least one")
	}
	c.Scenarios = out
	if c.Duration < time.Second {
		return fmt.Errorf("--duration: %s is below 1s", c.Duration)
	}
	if c.Clients < 1 || c.Clients > 256 {
		return fmt.Errorf("--clients: %d is out of range 1-256", c.Clients)
	}
	if c.DeletingBound <= 0 {
		return errors.New("--deleting-bound: must be positive")
	}
	if c.OpTimeout < 0 {
		return errors.New("--op-timeout: must be positive")
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultConfig().OpTimeout
	}
	if c.CheckTimeout < 0 {
		return errors.New("CheckTimeout: must be positive")
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = DefaultConfig().CheckTimeout
	}
	if c.Endpoint == "" && c.Binary == "" {
		return errors.New("no shoal binary to start a node with (Binary; shoal-lab: --shoal-binary)")
	}
	if c.Endpoint != "" {
		for _, s := range c.Scenarios {
			if scenarios[s].needsProcess {
				return fmt.Errorf("--scenario %s kills or pauses the node process, which needs a node this run starts (drop --endpoint)", s)
			}
		}
	}
	return nil
}

// ScenarioNames lists every scenario in run order.
func ScenarioNames() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return scenarios[a].order - scenarios[b].order })
	return names
}
