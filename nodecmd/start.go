package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"shoal"
	shoalcli "shoal/cli"
	"shoal/node"
	"shoal/pki"
	"shoal/store"
	"shoal/tracing"
)

// start is `shoal node start`.
func start(t *shoalcli.Tool) *cli.Command {
	def := node.DefaultConfig()
	return &cli.Command{
		Name:  "start",
		Usage: "run a node in the foreground",
		Description: `Runs the API, the coordinator (when this node leads) and the Docker agent.
By default etcd is embedded, with its data in --data-dir, and serves clients on
127.0.0.1:2379 so that etcdctl works against a dev node. --etcd-endpoints uses an
external etcd instead. SIGINT/SIGTERM shut down gracefully; a second one exits at once.

Clusters: every voter starts with the same --etcd-initial-cluster
(n1=https://10.0.0.1:2380,n2=...; the names are node ids; http:// only with
--insecure, no TLS), or a node joins a
running cluster with --join ADDRESS (any node's API). Listening on 0.0.0.0
needs --etcd-advertise-client/--etcd-advertise-peer. A node restarted on its
data dir rejoins as itself with the same flags (the initial-cluster flags are
ignored then, as etcd does). --etcd-endpoints makes a worker: no member, an
etcd client only.

Identity: a node id belongs to one installation, kept in --data-dir (its
instance file). Restarted on its data dir, a node takes its id back; another
data dir under the id of a NotReady node is refused until ` + "`shoal node remove ID`" + `
has removed that node, or taken over with --replace-node (once: the old node's
sandboxes show ERROR here, their containers stay on the old host). A Ready
node's id is never taken. With TLS, --tls-cert must name --node-id (its common
name), and a cluster at --join or --etcd-endpoints whose CA is not --tls-ca's
fails the start at once.

Exit codes: 2 bad flags (also a certificate that names another node, or a
cluster whose certificates do not fit this node's), 4 the node id is another
installation's, 1 any other failure.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node-id", Value: def.ID, EnvVars: []string{"SHOAL_NODE_ID"}, Usage: "`ID` of this node"},
			&cli.StringFlag{Name: "listen", Value: def.Listen, Usage: "API `ADDRESS`"},
			&cli.StringFlag{Name: "data-dir", Value: def.DataDir, EnvVars: []string{"SHOAL_DATA_DIR"}, Usage: "`DIR` for the embedded etcd's data and this installation's identity (its instance file, which a worker keeps too)"},
			&cli.StringSliceFlag{Name: "etcd-endpoints", EnvVars: []string{"SHOAL_ETCD_ENDPOINTS"}, Usage: "external etcd `URLS` (comma-separated); disables the embedded etcd"},
			&cli.StringFlag{Name: "etcd-listen-client", Value: def.EtcdListenClient, Usage: "embedded etcd client `URL`"},
			&cli.StringFlag{Name: "etcd-listen-peer", Value: def.EtcdListenPeer, Usage: "embedded etcd peer `URL`"},
			&cli.StringFlag{Name: "etcd-advertise-client", Usage: "client `URL` other nodes dial for this member (default: --etcd-listen-client)"},
			&cli.StringFlag{Name: "etcd-advertise-peer", Usage: "peer `URL` other members dial for this member (default: --etcd-listen-peer)"},
			&cli.StringFlag{Name: "etcd-initial-cluster", Usage: "static bootstrap of embedded members, as etcd's: every voter as `NAME=URL,...`, the same list on each (NAME: node id, URL: peer URL)"},
			&cli.StringFlag{Name: "etcd-initial-cluster-state", Usage: "`STATE`: new (bootstrap, the default) or existing (a member added to a running cluster), as etcd's"},
			&cli.BoolFlag{Name: "replace-node", Usage: "take over the id of a NotReady node of another installation (another data dir): the sandboxes placed on it stay on the id and show ERROR (their containers are on the old host, which this node never reaches); without it such a start is refused until shoal node remove has removed the old node"},
			&cli.StringFlag{Name: "join", Usage: "join the cluster of the node at API `ADDRESS` as a new embedded member (a learner, promoted once caught up)"},
			&cli.StringFlag{Name: "docker-host", EnvVars: []string{"DOCKER_HOST"}, Usage: "Docker engine `ADDRESS` (default: the local socket)"},
			&cli.StringFlag{Name: "image", Value: def.DefaultImage, Usage: "default sandbox `IMAGE`"},
			&cli.StringFlag{Name: "prefix", Value: def.Prefix, Usage: "etcd key `PREFIX`"},
			&cli.DurationFlag{Name: "lease-ttl", Value: def.LeaseTTL, Usage: "leader lease `TTL`"},
			&cli.StringFlag{Name: "advertise", Usage: "API `ADDRESS` other nodes and clients reach this node at (default: --listen)"},
			&cli.StringSliceFlag{Name: "node-label", Usage: "placement label `KEY=VALUE` of this node, repeatable"},
			&cli.IntFlag{Name: "max-sandboxes", Value: def.MaxSandboxes, Usage: "place at most `N` sandboxes on this node (0: no cap)"},
			&cli.DurationFlag{Name: "node-ttl", Value: def.NodeTTL, Usage: "liveness lease `TTL` of this node's registry entry; a node that cannot renew it within the TTL freezes its sandboxes"},
			&cli.DurationFlag{Name: "fence-margin", DefaultText: "--node-ttl", Usage: "when this node leads, delete the sandboxes of a lost node this long after its lease expired (`DURATION`)"},
			&cli.DurationFlag{Name: "resync", Value: def.Resync, Usage: "reconcile everything every `INTERVAL`"},
			&cli.DurationFlag{Name: "event-ttl", Value: def.EventTTL, Usage: "keep the sandbox events this node records for `DURATION` (1m to 24h; they expire on etcd leases)"},
			&cli.DurationFlag{Name: "engine-grace", Usage: "publish EngineUnavailable (placement skips the node, /readyz fails, its sandboxes show UNKNOWN) when the Docker engine has not answered for `DURATION` (default twice --node-ttl)"},
			&cli.DurationFlag{Name: "orphan-grace", Value: def.OrphanGrace, Usage: "reap unrecorded containers after `DURATION`"},
			&cli.IntFlag{Name: "max-watches", Value: def.MaxWatches, Usage: "serve at most `N` watch streams at once (more: RESOURCE_EXHAUSTED)"},
			&cli.IntFlag{Name: "max-streams-per-client", Value: def.MaxStreamsPerClient, Usage: "with mutual TLS, serve one client certificate on one host at most `N` open streams (watches, exec, logs) at once; 0: no cap"},
			&cli.IntFlag{Name: "max-execs", Value: def.MaxExecs, Usage: "serve at most `N` exec, sandbox cp and logs --follow streams at once (more: RESOURCE_EXHAUSTED)"},
			&cli.IntFlag{Name: "max-pending-conns", Value: def.MaxPendingConns, Usage: "hold at most `N` API connections not yet past their handshake (mutual TLS, or in plaintext the HTTP/2 preface); more are closed at once, and /readyz fails while the cap stays reached (lowered to half the open-file limit if above it)"},
			&cli.IntFlag{Name: "max-pending-conns-per-source", Value: def.MaxPendingConnsPerSource, Usage: "hold at most `N` API connections not yet past their handshake from one address (an IPv6 /64); more are closed at once"},
			&cli.DurationFlag{Name: "handshake-timeout", Value: def.HandshakeTimeout, Usage: "close an API connection not past its handshake within `DURATION` of being accepted"},
			&cli.StringFlag{Name: "runtime", Value: def.Runtime, Usage: "`RUNTIME` of the sandboxes: docker, or hollow (containers simulated in memory, for scale tests only; the node is labelled shoal.dev/runtime=hollow)"},
			&cli.DurationFlag{Name: "hollow-latency", Usage: "with --runtime hollow: `DURATION` each simulated container change and exec takes"},
			&cli.BoolFlag{Name: "hollow-egress", Usage: "with --runtime hollow: enforce egress policies as a Docker node does (a socket per sandbox with rules, served by the node's proxy under --egress-dir), the sidecars simulated; for scale tests of egress"},
			&cli.BoolFlag{Name: "openshell-api", Value: def.OpenShellAPI, Usage: "serve OpenShell's gateway API (openshell.v1) beside shoal.v1 on the same address, so OpenShell's clients work unchanged (--openshell-api=false: shoal.v1 only)"},
			&cli.BoolFlag{Name: "watch-cache", Value: def.WatchCache, Usage: "serve reads and watches from a watch-fed copy of sandboxes and providers (--watch-cache=false: every read from etcd)"},
			&cli.StringFlag{Name: "debug-listen", Usage: "serve net/http/pprof on `ADDRESS` (off by default; plaintext, so loopback only unless --insecure)"},
			&cli.StringFlag{Name: "tls-cert", Usage: "this node's certificate `FILE` (`shoal certs init` writes DIR/<node>.crt): the API, forwarding, the embedded etcd's client and peer URLs (then https://127.0.0.1:2379 and :2380 by default) and the etcd client use mutual TLS"},
			&cli.StringFlag{Name: "tls-key", Usage: "the key `FILE` of --tls-cert"},
			&cli.StringFlag{Name: "tls-ca", Usage: "the cluster CA's certificate `FILE`: clients, nodes and etcd peers must present a certificate it signed"},
			&cli.Int64Flag{Name: "sandbox-cpu-millis", Value: def.SandboxLimits.DefaultCPUMillis, Usage: "CPU of a sandbox that asks for none, in `MILLICORES`"},
			&cli.Int64Flag{Name: "sandbox-max-cpu-millis", Usage: "refuse sandboxes asking for more CPU than `MILLICORES` (0: what the host has)"},
			&cli.Int64Flag{Name: "sandbox-memory-mib", Value: def.SandboxLimits.DefaultMemoryBytes >> 20, Usage: "memory of a sandbox that asks for none, in `MIB`"},
			&cli.Int64Flag{Name: "sandbox-max-memory-mib", Usage: "refuse sandboxes asking for more memory than `MIB` (0: what the host has)"},
			&cli.Int64Flag{Name: "sandbox-pids", Value: def.SandboxLimits.Pids, Usage: "at most `N` processes in a sandbox (1 or more: every sandbox is capped)"},
			&cli.StringFlag{Name: "sandbox-network", Value: def.SandboxNetwork, Usage: "`NETWORK` sandboxes get: none (a loopback of their own) or bridge (the shoal-sandboxes bridge network: outbound traffic, no traffic between sandboxes); never the host's"},
			&cli.StringFlag{Name: "egress-dir", Usage: "`DIR` for the unix sockets the node's egress proxy serves each sandbox with egress rules on (bind-mounted into that sandbox's sidecar; the engine must see this path as the node does; default: DATA-DIR/egress)"},
			&cli.StringFlag{Name: "egress-image", Value: "shoal/egress:dev", Usage: "`IMAGE` of the egress sidecar (built by make image; it must be on the node's engine)"},
			&cli.Int64Flag{Name: "sandbox-log-max-mib", Value: def.SandboxLogMaxBytes >> 20, Usage: "rotate each sandbox's logs (its container's output, as the engine keeps it) at `MIB` (at least 1)"},
			&cli.IntFlag{Name: "sandbox-log-files", Value: def.SandboxLogFiles, Usage: "keep `N` rotated log files per sandbox (at least 1): at most N × --sandbox-log-max-mib of each sandbox's output is kept"},
			&cli.StringFlag{Name: "otlp-endpoint", Usage: "export OpenTelemetry traces over OTLP to the collector at `HOST:PORT` (off by default)"},
			&cli.StringFlag{Name: "otlp-protocol", Value: tracing.ProtocolGRPC, Usage: "`PROTOCOL` of --otlp-endpoint: grpc (port 4317 by convention) or http/protobuf (POST /v1/traces, port 4318)"},
			&cli.BoolFlag{Name: "otlp-insecure", Usage: "send to --otlp-endpoint without TLS (a collector on loopback)"},
			&cli.StringFlag{Name: "trace-file", Usage: "write OpenTelemetry spans as JSON lines to `FILE` (instead of --otlp-endpoint)"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics (/metrics) and health (/healthz, /readyz) on `ADDRESS` (plain HTTP, no credentials in it; off by default)"},
			&cli.StringFlag{Name: "audit-log", Usage: "write a JSON line per mutating call and exec to `FILE` (mode 0600): time, identity, role, method, object, code, request id"},
			&cli.Int64Flag{Name: "audit-log-max-mib", Value: 100, Usage: "rotate the audit log at `MIB`"},
			&cli.IntFlag{Name: "audit-log-backups", Value: 5, Usage: "keep `N` rotated audit logs (FILE.1 the newest)"},
			&cli.StringFlag{Name: "encryption-key-file", Usage: "YAML key ring `FILE` (mode 0600) that encrypts provider credentials in etcd with AES-256-GCM (`shoal admin new-encryption-key` writes one); every node needs the same keys"},
			&cli.BoolFlag{Name: "insecure", Usage: "allow listening and advertising on non-loopback addresses without TLS (private networks only)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "`LEVEL`: debug, info, warn, error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "`FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return shoalcli.UsageError("node start takes no arguments (got %q)", strings.Join(c.Args().Slice(), " "))
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return shoalcli.UsageError("--log-level: %q is not debug, info, warn or error", c.String("log-level"))
			}
			opts := &slog.HandlerOptions{Level: level}
			var h slog.Handler
			switch c.String("log-format") {
			case "text":
				h = slog.NewTextHandler(t.Stderr(), opts)
			case "json":
				h = slog.NewJSONHandler(t.Stderr(), opts)
			default:
				return shoalcli.UsageError("--log-format: %q is not text or json", c.String("log-format"))
			}
			cfg := def
			cfg.ID = c.String("node-id")
			cfg.Listen = c.String("listen")
			cfg.DataDir = c.String("data-dir")
			cfg.EtcdEndpoints = c.StringSlice("etcd-endpoints")
			cfg.EtcdListenClient = c.String("etcd-listen-client")
			cfg.EtcdListenPeer = c.String("etcd-listen-peer")
			cfg.EtcdAdvertiseClient = c.String("etcd-advertise-client")
			cfg.EtcdAdvertisePeer = c.String("etcd-advertise-peer")
			cfg.EtcdInitialCluster = c.String("etcd-initial-cluster")
			cfg.EtcdInitialClusterState = c.String("etcd-initial-cluster-state")
			cfg.Join = c.String("join")
			cfg.ReplaceNode = c.Bool("replace-node")
			cfg.DockerHost = c.String("docker-host")
			cfg.DefaultImage = c.String("image")
			cfg.Prefix = c.String("prefix")
			cfg.LeaseTTL = c.Duration("lease-ttl")
			cfg.Resync = c.Duration("resync")
			cfg.OrphanGrace = c.Duration("orphan-grace")
			cfg.EngineGrace = c.Duration("engine-grace")
			cfg.MaxWatches = c.Int("max-watches")
			cfg.MaxExecs = c.Int("max-execs")
			cfg.MaxPendingConns = c.Int("max-pending-conns")
			cfg.MaxPendingConnsPerSource = c.Int("max-pending-conns-per-source")
			cfg.HandshakeTimeout = c.Duration("handshake-timeout")
			cfg.Advertise = c.String("advertise")
			labels, err := shoalcli.ParseKV("--node-label", c.StringSlice("node-label"))
			if err != nil {
				return err
			}
			cfg.NodeLabels = labels
			cfg.MaxSandboxes = c.Int("max-sandboxes")
			cfg.NodeTTL = c.Duration("node-ttl")
			cfg.FenceMargin = c.Duration("fence-margin")
			cfg.EventTTL = c.Duration("event-ttl")
			cfg.Version = shoalcli.Version
			cfg.DebugListen = c.String("debug-listen")
			cfg.MetricsListen = c.String("metrics-listen")
			cfg.MaxStreamsPerClient = c.Int("max-streams-per-client")
			cfg.TLS = pki.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}
			cfg.Insecure = c.Bool("insecure")
			cfg.EncryptionKeyFile = c.String("encryption-key-file")
			cfg.AuditLog, cfg.AuditLogMaxBytes, cfg.AuditLogBackups = c.String("audit-log"), c.Int64("audit-log-max-mib")<<20, c.Int("audit-log-backups")
			cfg.SandboxLimits = shoal.SandboxLimits{DefaultCPUMillis: c.Int64("sandbox-cpu-millis"), MaxCPUMillis: c.Int64("sandbox-max-cpu-millis"),
				DefaultMemoryBytes: c.Int64("sandbox-memory-mib") << 20, MaxMemoryBytes: c.Int64("sandbox-max-memory-mib") << 20, Pids: c.Int64("sandbox-pids")}
			cfg.SandboxNetwork = c.String("sandbox-network")
			cfg.EgressDir, cfg.EgressImage = c.String("egress-dir"), c.String("egress-image")
			cfg.SandboxLogMaxBytes, cfg.SandboxLogFiles = c.Int64("sandbox-log-max-mib")<<20, c.Int("sandbox-log-files")
			cfg.WatchCache = c.Bool("watch-cache")
			cfg.OpenShellAPI = c.Bool("openshell-api")
			cfg.Runtime = c.String("runtime")
			cfg.HollowLatency = c.Duration("hollow-latency")
			cfg.HollowEgress = c.Bool("hollow-egress")
			cfg.Logger = slog.New(h)
			tp, stopTracing, err := tracing.New(c.Context, tracing.Options{OTLPEndpoint: c.String("otlp-endpoint"), OTLPProtocol: c.String("otlp-protocol"),
				OTLPInsecure: c.Bool("otlp-insecure"), File: c.String("trace-file"), Node: cfg.ID})
			if err != nil {
				return shoalcli.UsageError("%v", err)
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = stopTracing(sctx) // flushes the last spans
				cancel()
			}()
			cfg.Tracer = tp
			n, err := node.New(cfg)
			if err != nil {
				// Each names its flag and says what is wrong: one line.
				return shoalcli.Exit(shoalcli.ExitUsage, err.Error(), "")
			}
			// The banner waits for Ready, or for Run to return
			// early; either way the goroutine ends before we do.
			runDone := make(chan struct{})
			bannerDone := make(chan struct{})
			go func() {
				defer close(bannerDone)
				select {
				case <-n.Ready():
					fmt.Fprintf(t.Stderr(), "shoal node %s serving the API on %s (etcd %s)\n", cfg.ID, n.Addr(), n.EtcdEndpoint())
				case <-runDone:
				}
			}()
			err = n.Run(c.Context)
			close(runDone)
			<-bannerDone
			if err != nil {
				return shoalcli.Exit(startExit(err), err.Error(), "")
			}
			return nil
		},
	}
}

// startExit is the exit code of a node that failed to start: 4 when its
// id is another installation's (a live node's, or a NotReady one's without
// --replace-node), 2 when its certificates do not fit the cluster's (fix
// the flags), 1 otherwise.
func startExit(err error) int {
	var ce *pki.CertError
	switch {
	case errors.Is(err, store.ErrNodeIDTaken):
		return shoalcli.ExitPrecondition
	case errors.As(err, &ce):
		return shoalcli.ExitUsage
	}
	return shoalcli.ExitError
}
