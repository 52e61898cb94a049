package lab

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"shoal/chaos"
	shoalcli "shoal/cli"
)

func chaosCmd(t *shoalcli.Tool) *cli.Command {
	def := chaos.DefaultConfig()
	common := []cli.Flag{
		&cli.Int64Flag{Name: "seed", Value: def.Seed, Usage: "`SEED` of the op and fault schedule (printed, for replay)"},
		&cli.IntFlag{Name: "clients", Value: def.Clients, Usage: "`N` concurrent traffic clients"},
		&cli.StringFlag{Name: "report", Value: def.ReportDir, Usage: "write the report to `DIR`"},
		&cli.DurationFlag{Name: "deleting-bound", Value: def.DeletingBound, Usage: "after faults heal, no sandbox may stay DELETING longer than `DURATION`"},
		&cli.DurationFlag{Name: "op-timeout", Value: def.OpTimeout, Usage: "bound every traffic call to `DURATION` (a call that times out is recorded as ambiguous)"},
		&cli.BoolFlag{Name: "keep-data", Usage: "keep the run's etcd data and node log"},
		shoalBinaryFlag(),
	}
	// Only a run can be aimed at existing nodes (--endpoint): a soak
	// samples the node processes, so it always starts its own.
	existing := []cli.Flag{
		&cli.StringSliceFlag{Name: "etcd-endpoints", Usage: "etcd `URLS` of the node given with --endpoint (the checkers read etcd directly)"},
		&cli.StringFlag{Name: "node-id", Usage: "node `ID` of the node given with --endpoint (for its containers)"},
	}
	// binary sets the shoal binary the nodes run (--shoal-binary).
	binary := func(c *cli.Context, cfg *chaos.Config) error {
		bin, err := shoalBinary(c.String("shoal-binary"))
		cfg.Binary = bin
		return err
	}
	fill := func(c *cli.Context) (chaos.Config, error) {
		cfg := def
		cfg.Seed = c.Int64("seed")
		cfg.Clients = c.Int("clients")
		cfg.ReportDir = c.String("report")
		cfg.DeletingBound = c.Duration("deleting-bound")
		cfg.OpTimeout = c.Duration("op-timeout")
		cfg.KeepData = c.Bool("keep-data")
		if t.TTY() {
			cfg.Progress = t.Stderr()
		} else {
			cfg.Log = t.Stderr()
		}
		return cfg, nil
	}
	return &cli.Command{
		Name:  "chaos",
		Usage: "run the chaos suite: traffic, injected faults, recorded history, invariant checks",
		Subcommands: []*cli.Command{
			{
				Name:  "run",
				Usage: "run scenarios once and check the invariants",
				Description: `Starts a node of its own (a child process of the shoal binary, --shoal-binary,
with etcd and the Docker socket behind fault proxies), or with --cluster N a
cluster of N voters (and --workers M workers) as separate hosts: each node in its
own container on a private Docker network with its own Docker engine, all of the
same static shoal binary; or uses the running nodes --endpoint names.
Drives traffic from --clients clients (spread over the nodes, each moving on to
the next node as the CLI does) plus writers aimed at sandboxes being deleted,
injects the
scenario's faults, then checks every invariant (docs/chaos.md). Exits 1 on any
violation. The same --seed replays the same schedule of ops and faults.

Scenarios: ` + strings.Join(chaos.ScenarioNames(), ", ") + `, or all (every scenario
the system under test supports). leader-kill, owner-kill, node-stop, partition,
member-loss and slow-peer need --cluster; on a cluster the single-node faults hit
any host.

  shoal-lab chaos run --cluster 3 --workers 1 --scenario all --duration 30m`,
				Flags: append([]cli.Flag{
					&cli.IntFlag{Name: "cluster", Usage: "start `N` voters (3 or more) as separate hosts, each in its own container with its own Docker engine (needs root), instead of one node"},
					&cli.IntFlag{Name: "workers", Usage: "with --cluster: add `M` worker nodes (etcd clients only)"},
					&cli.StringSliceFlag{Name: "scenario", Value: cli.NewStringSlice("all"), Usage: "`NAME` of a scenario, or all; repeatable"},
					&cli.DurationFlag{Name: "duration", Value: def.Duration, Usage: "traffic `DURATION`, split across the scenarios"},
				}, append(common, existing...)...),
				Action: func(c *cli.Context) error {
					if c.NArg() != 0 {
						return shoalcli.UsageError("chaos run takes no arguments")
					}
					cfg, _ := fill(c)
					cfg.EtcdEndpoints = c.StringSlice("etcd-endpoints")
					cfg.NodeID = c.String("node-id")
					if c.IsSet("endpoint") {
						cfg.Endpoint = t.Endpoint()
					}
					cfg.Scenarios = c.StringSlice("scenario")
					cfg.Duration = c.Duration("duration")
					cfg.Cluster, cfg.Workers = c.Int("cluster"), c.Int("workers")
					// Nodes --endpoint names need no binary.
					if cfg.Endpoint == "" || c.IsSet("shoal-binary") {
						if err := binary(c, &cfg); err != nil {
							return err
						}
					}
					if err := cfg.Validate(); err != nil {
						return shoalcli.UsageError("%v", err)
					}
					fmt.Fprintf(t.Stderr(), "chaos: seed %d, scenarios %s, %s\n", cfg.Seed, strings.Join(cfg.Scenarios, ","), cfg.Duration)
					rep, err := chaos.Run(c.Context, cfg)
					if rep != nil {
						rep.WriteSummary(t.Stdout())
					}
					if err != nil {
						return shoalcli.Failure("%s", err.Error())
					}
					if rep.Failed() {
						n := len(rep.Violations)
						return shoalcli.Failure("%d invariant violation(s); report in %s; replay with --seed %d", n, cfg.ReportDir, cfg.Seed)
					}
					return nil
				},
			},
			{
				Name:  "soak",
				Usage: "run scenarios back to back for a long time, checking invariants and resource growth",
				Description: `Cycles through every scenario until --duration is over. Each cycle checks the
invariants, deletes everything, compacts etcd and samples each node's goroutines,
RSS, open fds, its engine's container count and its etcd member's database size;
the soak fails on any violation, or when a figure grows past its bound over the
node's first sample (docs/chaos.md). With --cluster N the nodes are separate hosts
as in chaos run, every node is sampled, and a cycle defaults to one minute per
scenario (13m for all 13); on one node it defaults to 2m. A soak always starts
its own node or hosts: --endpoint (and SHOAL_ENDPOINT) are not used.

  shoal-lab chaos soak --duration 2h
  shoal-lab chaos soak --cluster 3 --duration 2h`,
				Flags: append([]cli.Flag{
					&cli.IntFlag{Name: "cluster", Usage: "start `N` voters (3 or more) as separate hosts, each in its own container with its own Docker engine (needs root), instead of one node"},
					&cli.IntFlag{Name: "workers", Usage: "with --cluster: add `M` worker nodes (etcd clients only)"},
					&cli.DurationFlag{Name: "duration", Value: 2 * time.Hour, Usage: "soak `DURATION`"},
					&cli.DurationFlag{Name: "cycle", Usage: "traffic `DURATION` of one cycle (all scenarios); default 2m on one node, 1m per scenario on a cluster"},
				}, common...),
				Action: func(c *cli.Context) error {
					if c.NArg() != 0 {
						return shoalcli.UsageError("chaos soak takes no arguments")
					}
					cfg, _ := fill(c)
					cfg.Scenarios = []string{"all"}
					cfg.Cluster, cfg.Workers = c.Int("cluster"), c.Int("workers")
					if err := binary(c, &cfg); err != nil {
						return err
					}
					if err := cfg.Validate(); err != nil {
						return shoalcli.UsageError("%v", err)
					}
					cfg.Duration = c.Duration("cycle")
					switch {
					case c.IsSet("cycle") && cfg.Duration < time.Second:
						return shoalcli.UsageError("--cycle: %s is below 1s", cfg.Duration)
					case c.IsSet("cycle"):
					case cfg.Cluster > 0:
						cfg.Duration = time.Duration(len(cfg.Scenarios)) * time.Minute
					default:
						cfg.Duration = 2 * time.Minute
					}
					if c.Duration("duration") < cfg.Duration {
						return shoalcli.UsageError("--duration: %s is shorter than one cycle (%s)", c.Duration("duration"), cfg.Duration)
					}
					fmt.Fprintf(t.Stderr(), "chaos soak: seed %d, %s in cycles of %s\n", cfg.Seed, c.Duration("duration"), cfg.Duration)
					res, err := chaos.Soak(c.Context, cfg, c.Duration("duration"))
					if res != nil {
						res.WriteSummary(t.Stdout())
					}
					if err != nil {
						return shoalcli.Failure("%s", err.Error())
					}
					if res.Failed() {
						return shoalcli.Failure("soak failed; report in %s; replay with --seed %d", cfg.ReportDir, cfg.Seed)
					}
					return nil
				},
			},
		},
	}
}
