package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiclient"
	"shoal/pki"
	"shoal/tracectx"
)

// Version is stamped at build time (-ldflags -X shoal/cli.Version=...) by
// make build and deploy/node/build.sh, both with `git describe --tags
// --always --dirty`, "dev" outside git. `shoal version` prints it and a
// node registers it (node list's VERSION): one variable for both, so a
// node never reports another version than its binary.
var Version = "dev"

// app holds what every command shares.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	endpoint       string
	workspace      string
	tls            pki.Files // the client certificate, when the cluster runs mutual TLS
	trace          bool      // --trace: carry a sampled trace context on every call
	configPath     string
	config         *clientConfig
	contextErr     error // the config file's current context is broken: calls refuse, config commands run
	out            printer
	conn           *apiclient.Conn
	client         shoalv1.ShoalClient
	tty            bool
	ctx            context.Context
	// kind is "sandbox", "provider" or "node" while one of their
	// subcommands runs, so that hints can name the right command.
	kind string
	// lookupEnv reads the environment (--credential-from-env).
	lookupEnv func(string) (string, bool)
	// helpCmd is the command line of the command being run, binary and
	// command path ("shoal sandbox get"): usage hints name its --help.
	helpCmd string
	// args is the command line as given to Main, before Reorder: the
	// commands that run shoal-node hand it on unchanged (nodebinary.go).
	args []string
	// unknownCmd is a command name that matched no command (urfave/cli's
	// CommandNotFound), a usage error.
	unknownCmd string
}

// Main runs the CLI and returns the process exit code. exts are the
// commands the binary adds to the tree (Extension): `shoal node start` and
// `shoal cluster snapshot restore`, from package nodecmd in shoal-node and
// NodeCommands (which run shoal-node) in shoal.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, exts ...Extension) int {
	return run(ctx, args, stdin, stdout, stderr, shoalSpec(exts...))
}

// shoalSpec is the `shoal` binary's command tree, with exts in it.
func shoalSpec(exts ...Extension) ToolSpec {
	return ToolSpec{
		Name:  "shoal",
		Usage: "a clustered control plane for agent sandboxes",
		Description: `shoal runs AI agents in Docker sandboxes and injects provider credentials into them.
All state lives in etcd; every change is a compare-and-swap transaction.
The chaos suite, the soak and the fleet bench are a binary of their own:
shoal-lab (make build builds bin/shoal-lab).

Flags may come before or after positional arguments.

` + exitCodesHelp,
		Commands: func(t *Tool) []*cli.Command {
			a := t.a
			return extend(t, []*cli.Command{a.providerCmd(), a.sandboxCmd(), a.eventsCmd(), a.nodeCmd(), a.clusterCmd(), a.certsCmd(), a.configCmd(), a.adminCmd(),
				movedToLab("chaos"), movedToLab("bench")}, exts)
		},
	}
}

// run runs the command tree of spec: the one path of Main and RunTool.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, spec ToolSpec) int {
	bufferHelp()
	a := &app{args: args, stdout: stdout, stderr: stderr, stdin: stdin, ctx: ctx, tty: isTerminal(stderr), lookupEnv: os.LookupEnv}
	// The root's Before sets the format; errors before it still print.
	a.out = printer{w: stdout, errw: stderr, format: formatTable, now: time.Now}
	root := a.tree(spec)
	if len(args) == 0 || args[len(args)-1] != completionFlag {
		// A completion request must keep its words in place and its
		// flag last (completion.go).
		args = Reorder(root, args)
	}
	a.helpCmd = strings.Join(append([]string{spec.Name}, commandPath(root, args)...), " ")
	err := root.RunContext(ctx, args)
	if err == nil && a.unknownCmd != "" {
		err = &exitError{code: ExitUsage, msg: fmt.Sprintf("unknown command %q for %q", a.unknownCmd, a.helpCmd),
			hint: fmt.Sprintf("`%s --help` lists the commands", a.helpCmd)}
	}
	if a.conn != nil {
		a.conn.Close()
	}
	if err == nil {
		return ExitOK
	}
	e := a.classify(err)
	a.out.failure(e, "")
	a.out.hint(e.hint)
	return e.code
}

func (a *app) tree(spec ToolSpec) *cli.App {
	root := a.root(spec)
	// Every command reports bad flags as usage errors (exit 2).
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError("%v", err) }
			if len(c.Subcommands) == 0 || c.Action != nil {
				// Its arguments are names, and urfave/cli would take
				// one that is "help" or "h" for the help subcommand it
				// adds to every command (`sandbox get h` printed help,
				// exit 0). --help stays.
				c.HideHelpCommand = true
			}
			walk(c.Subcommands)
		}
	}
	walk(root.Commands)
	return root
}

// root is the app of spec with the global flags every shoal binary
// shares, and its version command.
func (a *app) root(spec ToolSpec) *cli.App {
	return &cli.App{
		Name:        spec.Name,
		Usage:       spec.Usage,
		Version:     Version,
		Description: spec.Description,
		Writer:      a.stdout,
		ErrWriter:   a.stderr,
		Reader:      a.stdin,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoint", Value: "127.0.0.1:7443", EnvVars: []string{"SHOAL_ENDPOINT"}, Usage: "shoal API `ADDRESSES`: host:port, or a comma-separated list of nodes (a call moves on to the next when a node is unreachable or refuses it unapplied)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: formatTable, Usage: "output `FORMAT`: table, json or yaml"},
			&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}, Value: "default", EnvVars: []string{"SHOAL_WORKSPACE"}, Usage: "`WORKSPACE` of the objects"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"SHOAL_TLS_CERT"}, Usage: "client certificate `FILE` for a cluster that runs mutual TLS (`shoal certs init` writes admin.crt, operator.crt, viewer.crt)"},
			&cli.StringFlag{Name: "tls-key", EnvVars: []string{"SHOAL_TLS_KEY"}, Usage: "the key `FILE` of --tls-cert"},
			&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"SHOAL_TLS_CA"}, Usage: "the cluster CA's certificate `FILE`, to verify the nodes by"},
			&cli.BoolFlag{Name: "trace", Usage: "start a sampled OpenTelemetry trace for this command and carry it to every node the command reaches (printed: the trace id to find in the nodes' --otlp-endpoint or --trace-file)"},
			&cli.StringFlag{Name: "context", EnvVars: []string{"SHOAL_CONTEXT"}, Usage: "use the `NAME`d context of the config file instead of its current one"},
			&cli.StringFlag{Name: "config", Value: defaultConfigPath(), EnvVars: []string{"SHOAL_CONFIG"}, Usage: "the config `FILE` of named contexts (`shoal config --help`)"},
		},
		Before: func(c *cli.Context) error {
			if err := a.applyContext(c); err != nil {
				return err
			}
			if c.Bool("trace") {
				ctx, id, err := tracectx.Start(c.Context)
				if err != nil {
					return err
				}
				c.Context, a.trace = ctx, true
				fmt.Fprintf(a.stderr, "trace id: %s\n", id)
			}
			if err := validFormat(c.String("output")); err != nil {
				return err
			}
			a.out.format = c.String("output")
			return nil
		},
		ExitErrHandler: func(*cli.Context, error) {}, // Main prints errors and picks exit codes
		// Called (instead of urfave/cli's "No help topic", exit 3) for an
		// unknown command; run makes it a usage error.
		CommandNotFound: func(_ *cli.Context, name string) { a.unknownCmd = name },
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError("%v", err)
		},
		Commands:             append(spec.Commands(&Tool{a}), a.versionCmd(spec.Name), a.completionCmd(spec.Name)),
		EnableBashCompletion: true, // `NAME completion bash|zsh` scripts ask the binary
	}
}

// api dials the endpoints on first use: one connection per node of
// --endpoint, behind apiclient's failover.
func (a *app) api() (shoalv1.ShoalClient, error) {
	if a.client != nil {
		return a.client, nil
	}
	if a.contextErr != nil {
		return nil, a.contextErr
	}
	var addrs []string
	for _, e := range strings.Split(a.endpoint, ",") {
		if e = strings.TrimSpace(e); e != "" {
			addrs = append(addrs, e)
		}
	}
	if len(addrs) == 0 {
		return nil, usageError("--endpoint: name at least one node (host:port)")
	}
	tr, err := a.tls.Transport()
	if err != nil {
		return nil, usageError("%v", err)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tr.DialCreds())}
	if a.trace {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(tracectx.Propagator))))
	}
	f, err := apiclient.Dial(addrs, append(opts,
		// A node that does not answer the connect is left after 5s for
		// the next (gRPC waits 20s by default).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}),
		grpc.WithReadBufferSize(shoal.ClientBufferBytes), grpc.WithWriteBufferSize(shoal.ClientBufferBytes),
		// The server's limits, from their one definition: a response the
		// server may send must never be refused here (gRPC's default
		// receive limit is 4 MiB, the server sends up to 8), and a
		// request over the server's limit fails here, before it is sent.
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(shoal.MaxResponseBytes),
			grpc.MaxCallSendMsgSize(shoal.MaxRequestBytes)))...)
	if err != nil {
		return nil, usageError("--endpoint: %v", err)
	}
	a.conn, a.client = f, shoalv1.NewShoalClient(f)
	return a.client, nil
}

// clusterAPI is the Cluster service on the same connection.
func (a *app) clusterAPI() (shoalv1.ClusterClient, error) {
	if _, err := a.api(); err != nil {
		return nil, err
	}
	return shoalv1.NewClusterClient(a.conn), nil
}

// clusterArgs is dialArgs for the Cluster service.
func (a *app) clusterArgs(c *cli.Context, n int, names string) (shoalv1.ClusterClient, error) {
	if err := exactArgs(c, n, names); err != nil {
		return nil, err
	}
	return a.clusterAPI()
}

// dialArgs checks the positional argument count, then dials: the opening
// of every command that takes fixed arguments.
func (a *app) dialArgs(c *cli.Context, n int, names string) (shoalv1.ShoalClient, error) {
	if err := exactArgs(c, n, names); err != nil {
		return nil, err
	}
	return a.api()
}

func (a *app) versionCmd(name string) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the client version",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(a.stdout, "%s %s\n", name, Version)
			return nil
		},
	}
}

// parseKV parses repeated K=V flag values. field names the flag in errors.
func parseKV(field string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, usageError("%s: %q is not KEY=VALUE", field, v)
		}
		if _, dup := m[k]; dup {
			return nil, usageError("%s: %q is given twice", field, k)
		}
		m[k] = val
	}
	return m, nil
}

// exactArgs checks the positional argument count. names says what the
// command takes ("NAME", "NAME PROVIDER"); with n 0 it is not read.
func exactArgs(c *cli.Context, n int, names string) error {
	if c.NArg() == n {
		return nil
	}
	if n == 0 {
		names = "no arguments"
	}
	return usageError("%s takes %s (got %d argument(s))", c.Command.HelpName, names, c.NArg())
}

// timeoutCtx bounds a call by --timeout when the command has one.
func (a *app) timeoutCtx(c *cli.Context) (context.Context, context.CancelFunc) {
	if c.IsSet("timeout") || c.Duration("timeout") > 0 {
		return context.WithTimeout(c.Context, c.Duration("timeout"))
	}
	return context.WithCancel(c.Context)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTTY(f.Fd())
}

// listPage is what one list call returns.
type listPage[T any] struct {
	items    []T
	warnings []string
	next     string
}

// allPages follows page tokens until the last page. It returns the
// warnings of every page it read, also when a later page fails, so that
// none is lost.
func allPages[T any](page func(token string) (listPage[T], error)) ([]T, []string, error) {
	var all []T
	var warnings []string
	tok := ""
	for {
		p, err := page(tok)
		warnings = append(warnings, p.warnings...)
		if err != nil {
			return nil, warnings, err
		}
		all = append(all, p.items...)
		if tok = p.next; tok == "" {
			return all, warnings, nil
		}
	}
}

// multiNameHelp states forEachName's contract in --help.
const multiNameHelp = `Every NAME is tried, also after another failed. Each failure prints one
"Error:" line naming its object; the exit code is the failures' code when all
share one, 1 otherwise (see shoal --help).`

// forEachName runs do for every name the command was given. One bad name
// must not stop the others (`sandbox delete a ../x b` still deletes a and
// b), so each failure is printed as it happens, naming its object, and the
// loop goes on. What do prints on success is printed as usual. The exit
// code is the failures' code when they all share one, ExitError otherwise:
// "all not found" stays distinguishable from a mix of causes.
func (a *app) forEachName(c *cli.Context, kind string, do func(api shoalv1.ShoalClient, name string) error) error {
	names := c.Args().Slice()
	if len(names) == 0 {
		return usageError("%s takes NAME... (one or more names)", c.Command.HelpName)
	}
	api, err := a.api()
	if err != nil {
		return err
	}
	code := ExitOK
	var hints []string
	fail := func(e *exitError, subject string) {
		a.out.failure(e, subject)
		if code == ExitOK {
			code = e.code
		} else if code != e.code {
			code = ExitError
		}
		if e.hint != "" && !slices.Contains(hints, e.hint) {
			hints = append(hints, e.hint)
		}
	}
	for i, name := range names {
		if c.Context.Err() != nil {
			// Interrupted: do not start on the rest, but say which those are.
			fail(&exitError{code: ExitError, msg: "interrupted; not tried: " + strings.Join(names[i:], " ")}, "")
			break
		}
		if err := do(api, name); err != nil {
			fail(a.classify(err), fmt.Sprintf("%s %q", kind, name))
		}
	}
	if code == ExitOK {
		return nil
	}
	// Hints once, after all failures: ten missing names need one hint.
	for _, h := range hints {
		a.out.hint(h)
	}
	return &exitError{code: code} // already printed
}

// recvAll hands every message of a server stream to handle until the
// stream ends or the user interrupts.
func recvAll[T any](ctx context.Context, recv func() (T, error), handle func(T) error) error {
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := handle(m); err != nil {
			return err
		}
	}
}
