package lab

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	shoalcli "shoal/cli"
	"shoal/scale"
)

func benchCmd(t *shoalcli.Tool) *cli.Command {
	def := scale.DefaultConfig()
	growth := make([]string, len(def.Growth))
	for i, g := range def.Growth {
		growth[i] = strconv.Itoa(g)
	}
	return &cli.Command{
		Name:  "bench",
		Usage: "benchmarks that need a fleet (the others are `make bench`)",
		Subcommands: []*cli.Command{{
			Name:  "cluster",
			Usage: "a fleet of hollow nodes on one etcd: create cost, list cost and memory as the records grow, node loss and leader loss",
			Description: `Starts a real etcd (in this process), --real-nodes real nodes and --hollow-nodes
hollow nodes (shoal node start --runtime hollow: containers simulated in memory),
each a process of the shoal binary (--shoal-binary), all on this machine. Creates --sandboxes-per-node
sandboxes per hollow node through the real nodes with --clients clients, and at
each --growth record count measures the create p99, the p99 of a paged List of
everything and the RSS of a real node that does not lead (the one the lists go
through). Then SIGKILLs a hollow node (time until its sandboxes are UNKNOWN)
and the leader (time until the new leader's term and its first fenced
removal). Growth points above the fleet (the default 50,000 of a 100 × 100
fleet) are measured last, by creating more sandboxes on the live hollow nodes.
Writes report.json, summary.txt and growth.png to --report. Needs a Docker
engine for the real nodes.

  shoal-lab bench cluster --hollow-nodes 100 --sandboxes-per-node 100`,
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "hollow-nodes", Value: def.HollowNodes, Usage: "`N` hollow nodes"},
				&cli.IntFlag{Name: "sandboxes-per-node", Value: def.SandboxesPerNode, Usage: "`M` sandboxes per hollow node"},
				&cli.IntFlag{Name: "real-nodes", Value: def.RealNodes, Usage: "`N` real nodes (the API and the leader)"},
				&cli.IntFlag{Name: "clients", Value: def.Clients, Usage: "`N` concurrent creating clients"},
				&cli.StringFlag{Name: "growth", Value: strings.Join(growth, ","), Usage: "record `COUNTS` of the growth curve, comma-separated; the fleet's total is always one, points above it are measured after the losses"},
				&cli.DurationFlag{Name: "node-ttl", Value: def.NodeTTL, Usage: "every node's liveness lease `TTL`"},
				&cli.DurationFlag{Name: "lease-ttl", Value: def.LeaseTTL, Usage: "the leader lease `TTL`"},
				&cli.DurationFlag{Name: "hollow-latency", Value: def.HollowLatency, Usage: "`DURATION` of each simulated container change"},
				&cli.StringFlag{Name: "report", Value: def.ReportDir, Usage: "write the report to `DIR`"},
				&cli.BoolFlag{Name: "keep-data", Usage: "keep the run's etcd data and node logs"},
				shoalBinaryFlag(),
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 0 {
					return shoalcli.UsageError("bench cluster takes no arguments")
				}
				cfg := def
				cfg.HollowNodes, cfg.SandboxesPerNode = c.Int("hollow-nodes"), c.Int("sandboxes-per-node")
				cfg.RealNodes, cfg.Clients = c.Int("real-nodes"), c.Int("clients")
				cfg.NodeTTL, cfg.LeaseTTL, cfg.HollowLatency = c.Duration("node-ttl"), c.Duration("lease-ttl"), c.Duration("hollow-latency")
				cfg.ReportDir, cfg.KeepData = c.String("report"), c.Bool("keep-data")
				cfg.Growth = nil
				for _, f := range strings.Split(c.String("growth"), ",") {
					if f = strings.TrimSpace(f); f == "" {
						continue
					}
					n, err := strconv.Atoi(f)
					if err != nil {
						return shoalcli.UsageError("--growth: %q is not a record count", f)
					}
					cfg.Growth = append(cfg.Growth, n)
				}
				cfg.Log = t.Stderr()
				bin, err := shoalBinary(c.String("shoal-binary"))
				if err != nil {
					return err
				}
				cfg.Binary = bin
				if err := cfg.Validate(); err != nil {
					return shoalcli.UsageError("%v", err)
				}
				rep, err := scale.Run(c.Context, cfg)
				if rep != nil {
					rep.WriteSummary(t.Stdout())
				}
				if err != nil {
					return shoalcli.Failure("%s", err.Error())
				}
				fmt.Fprintf(t.Stderr(), "report in %s\n", cfg.ReportDir)
				return nil
			},
		}},
	}
}
