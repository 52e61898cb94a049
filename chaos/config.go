package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
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

	// Endpoint of an existing node; empty starts one (Binary).
	Endpoint      string
	EtcdEndpoints []string
	NodeID        string
	Prefix        string
	// Binary is the shoal executable that runs the node.
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

// DefaultConfig returns the defaults of `shoal chaos run`.
func DefaultConfig() Config {
	bin, _ := os.Executable()
	return Config{
		Scenarios:     []string{"all"},
		Duration:      time.Minute,
		Seed:          time.Now().UnixNano() % 1_000_000,
		Clients:       8,
		ReportDir:     "chaos-report",
		DeletingBound: 30 * time.Second,
		Prefix:        "/shoal",
		Binary:        bin,
	}
}

// Validate checks the config and expands "all".
func (c *Config) Validate() error {
	var out []string
	for _, s := range c.Scenarios {
		if s == "all" {
			out = append(out, ScenarioNames()...)
			continue
		}
		if _, ok := scenarios[s]; !ok {
			return fmt.Errorf("--scenario: %q is not one of %s, all", s, strings.Join(ScenarioNames(), ", "))
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
	if c.Endpoint == "" && c.Binary == "" {
		return errors.New("no shoal binary to start a node with")
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
