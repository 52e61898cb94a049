package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiclient"
	"shoal/internal/backoff"
)

func (a *app) sandboxCmd() *cli.Command {
	return &cli.Command{
		Name:    "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Usage:   "manage sandboxes",
		Before:  func(*cli.Context) error { a.kind = "sandbox"; return nil },
		Subcommands: []*cli.Command{
			a.sandboxCreate(), a.sandboxGet(), a.sandboxList(), a.sandboxLabel(), a.sandboxDelete(),
			a.sandboxStop(), a.sandboxStart(), a.sandboxRestart(),
			a.sandboxExec(), a.sandboxShell(), a.sandboxLogs(), a.sandboxWatch(), a.sandboxAttach(true), a.sandboxAttach(false),
			a.sandboxEvents(), a.sandboxDescribe(),
			a.sandboxCp(), a.sandboxEgress(),
		},
	}
}

func (a *app) sandboxCreate() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a sandbox",
		ArgsUsage: "NAME [-- CMD ARGS...]",
		Description: `Creates a sandbox: a container running the image, with the providers'
credentials in its environment. Without a command the image's default runs.

  shoal sandbox create agent --provider nvidia --wait
  shoal sandbox create job --env MODE=batch --label team=ml -- sh -c 'echo hi; sleep 60'
  shoal sandbox create agent --egress-allow api.nvidia.com --egress-allow '*.github.com:443,22'
  shoal sandbox create agent --egress-file policy.yaml --egress-mode audit

--egress-allow, --egress-file and --egress-mode give the sandbox an egress
policy: what it may reach on the network (` + "`shoal sandbox egress --help`" + `
has the rule syntax and the commands that change it live). Without rules it
has no network.

With --wait it prints the sandbox once it left PROVISIONING and exits by its
phase: READY 0; STOPPED (a command that ended at once) 0 if the command exited
0, else 1, naming the code; ERROR (Docker refused it) 4.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "image", Usage: "container `IMAGE` (default: the node's, shoal/sandbox:dev)"},
			&cli.StringSliceFlag{Name: "provider", Aliases: []string{"p"}, Usage: "attach provider `NAME`, repeatable"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "environment `KEY=VALUE`, repeatable"},
			&cli.StringSliceFlag{Name: "label", Aliases: []string{"l"}, Usage: "label `KEY=VALUE`, repeatable"},
			&cli.Int64Flag{Name: "cpu-millis", Usage: "CPU limit in `MILLICORES` (1000 = one core; default: the node's --sandbox-cpu-millis)"},
			&cli.Int64Flag{Name: "memory-mib", Usage: "memory limit in `MIB` (default: the node's --sandbox-memory-mib)"},
			&cli.BoolFlag{Name: "read-only", Usage: "make the container's root filesystem read-only (a tmpfs /tmp stays writable)"},
			&cli.StringFlag{Name: "node", Usage: "run on node `NAME` (default: the Ready node with the fewest sandboxes)"},
			&cli.StringSliceFlag{Name: "node-selector", Usage: "only on nodes labelled `KEY=VALUE`, repeatable"},
			&cli.BoolFlag{Name: "wait", Usage: "return when the sandbox is READY (and its node enforces its egress policy), or has stopped or failed first; exit 1 if its command exited nonzero (STOPPED), 4 if it is in phase ERROR"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * 60e9, Usage: "give up waiting after `DURATION`"},
		}, egressCreateFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 {
				return usageError("sandbox create takes NAME [-- CMD ARGS...]")
			}
			eg, err := a.egressOfCreate(c)
			if err != nil {
				return err
			}
			env, err := parseKV("--env", c.StringSlice("env"))
			if err != nil {
				return err
			}
			labels, err := parseKV("--label", c.StringSlice("label"))
			if err != nil {
				return err
			}
			selector, err := parseKV("--node-selector", c.StringSlice("node-selector"))
			if err != nil {
				return err
			}
			if c.Int64("cpu-millis") < 0 || c.Int64("memory-mib") < 0 {
				return usageError("--cpu-millis and --memory-mib must not be negative")
			}
			if mib := c.Int64("memory-mib"); mib > shoal.MaxMemoryBytes>>20 {
				// Checked here: in bytes it would overflow before the
				// server could name the field.
				return usageError("--memory-mib: %d is over the maximum of %d MiB", mib, int64(shoal.MaxMemoryBytes>>20))
			}
			api, err := a.api()
			if err != nil {
				return err
			}
			name := c.Args().First()
			req := &shoalv1.CreateSandboxRequest{Wait: c.Bool("wait"), Sandbox: &shoalv1.Sandbox{
				Meta: &shoalv1.ObjectMeta{Name: name, Workspace: a.workspace, Labels: labels},
				Spec: &shoalv1.SandboxSpec{
					Image: c.String("image"), Command: c.Args().Tail(), Env: env, Providers: c.StringSlice("provider"),
					Resources: &shoalv1.Resources{CpuMillis: c.Int64("cpu-millis"), MemoryBytes: c.Int64("memory-mib") << 20},
					Node:      c.String("node"), NodeSelector: selector, ReadOnlyRoot: c.Bool("read-only"), Egress: eg,
				},
			}}
			ctx, cancel := a.timeoutCtx(c)
			defer cancel()
			var stop func(string)
			if req.Wait {
				stop = a.progress(fmt.Sprintf("waiting for sandbox %s to be READY", name))
			}
			// A create is safe to retry with its request id: a retry
			// after an ambiguous failure (the connection cut, a node
			// down) returns the sandbox the first attempt made. With
			// several --endpoint addresses the retry may go to another.
			req.RequestId = uuid.NewString()
			var sb *shoalv1.Sandbox
			// err is the last call's own error: Retry's (exhausted, or
			// the context ending between calls) only wraps it.
			_ = backoff.Retry(ctx, createRetry, func(int) error {
				sb, err = api.CreateSandbox(apiclient.Resendable(ctx), req)
				if status.Code(err) != codes.Unavailable {
					return backoff.Permanent(err)
				}
				return err
			})
			if stop != nil {
				stop("")
			}
			if err != nil {
				return err
			}
			if err := a.out.sandbox(sb); err != nil {
				return err
			}
			if req.Wait {
				return waitOutcome(sb)
			}
			return nil
		},
	}
}

// waitOutcome is the exit of `sandbox create --wait`, by the phase the
// wait ended in (README.md, "Exit codes"): READY, or STOPPED with exit
// code 0, is success; STOPPED with another code is a failure (1) naming
// the code; ERROR, which Docker refused, is a failed precondition (4).
func waitOutcome(sb *shoalv1.Sandbox) error {
	name, st := sb.GetMeta().GetName(), sb.GetStatus()
	switch st.GetPhase() {
	case shoalv1.SandboxPhase_STOPPED:
		if st.GetExitCode() == 0 {
			return nil
		}
		return &exitError{code: ExitError, msg: fmt.Sprintf("sandbox %s is STOPPED: its command exited with code %d", name, st.GetExitCode()),
			hint: "`shoal sandbox logs " + name + "` shows its output"}
	case shoalv1.SandboxPhase_ERROR:
		return &exitError{code: ExitPrecondition, msg: fmt.Sprintf("sandbox %s is in phase ERROR: %s", name, st.GetMessage()),
			hint: "fix the cause, then `shoal sandbox delete " + name + "` and create it again"}
	}
	return nil
}

func (a *app) sandboxGet() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "show a sandbox",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			api, err := a.dialArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			sb, err := api.GetSandbox(c.Context, &shoalv1.GetSandboxRequest{Workspace: a.workspace, Name: c.Args().First()})
			if err != nil {
				return err
			}
			return a.out.sandbox(sb)
		},
	}
}

func (a *app) sandboxList() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list sandboxes",
		Description: `-o json|yaml always prints {"items": [...]}, also for zero or one sandbox.
Warnings of the server (say, a corrupt record it skipped) go to stderr.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "label `SELECTOR`: k=v,k!=v,k,!k"},
		},
		Action: func(c *cli.Context) error {
			api, err := a.dialArgs(c, 0, "no arguments")
			if err != nil {
				return err
			}
			req := func(tok string) *shoalv1.ListSandboxesRequest {
				return &shoalv1.ListSandboxesRequest{Workspace: a.workspace, LabelSelector: c.String("selector"), PageToken: tok, PageSize: shoal.MaxPageSize}
			}
			// -o json|yaml decodes and renders each page while the next
			// is fetched (encoded.go).
			if pr := a.out.pageRenderer(func() proto.Message { return &shoalv1.Sandbox{} }); pr != nil {
				// What the list allocates is mostly held until it is
				// printed, as the process ends: a collection on the way
				// frees little, and on a busy machine its pauses wait
				// for threads the system does not run. The first comes
				// at 4 MiB of heap by default, and 3,000 sandboxes
				// allocate about 7.
				defer debug.SetGCPercent(debug.SetGCPercent(400)) // Main may run in a longer-lived process (tests)
				_, warnings, err := allPages(func(tok string) (listPage[[]byte], error) {
					resp := &shoalv1.ListSandboxesResponse{}
					items, err := invokeEncoded(c.Context, a.conn, shoalv1.Shoal_ListSandboxes_FullMethodName, req(tok), resp)
					if err == nil {
						pr.add(items)
					}
					return listPage[[]byte]{items, resp.GetWarnings(), resp.GetNextPageToken()}, err
				})
				a.out.warnings(warnings)
				items, rerr := pr.wait()
				if err == nil {
					err = rerr
				}
				if err != nil {
					return err
				}
				return a.out.renderedList(items)
			}
			all, warnings, err := allPages(func(tok string) (listPage[*shoalv1.Sandbox], error) {
				resp, err := api.ListSandboxes(c.Context, req(tok))
				return listPage[*shoalv1.Sandbox]{resp.GetItems(), resp.GetWarnings(), resp.GetNextPageToken()}, err
			})
			a.out.warnings(warnings)
			if err != nil {
				return err
			}
			return a.out.sandboxList(all)
		},
	}
}

func (a *app) sandboxLabel() *cli.Command {
	return &cli.Command{
		Name:      "label",
		Usage:     "set or remove labels",
		ArgsUsage: "NAME KEY=VALUE... KEY-...",
		Description: `KEY=VALUE sets a label, KEY- removes one.

  shoal sandbox label agent team=ml tier- --if-version 42`,
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "if-version", Usage: "apply only at this resource `VERSION`"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError("sandbox label takes NAME KEY=VALUE... KEY-...")
			}
			set := map[string]string{}
			var remove []string
			for _, arg := range c.Args().Tail() {
				if k, ok := strings.CutSuffix(arg, "-"); ok && !strings.Contains(arg, "=") {
					remove = append(remove, k)
					continue
				}
				k, v, ok := strings.Cut(arg, "=")
				if !ok || k == "" {
					return usageError("label %q: expected KEY=VALUE or KEY-", arg)
				}
				set[k] = v
			}
			api, err := a.api()
			if err != nil {
				return err
			}
			sb, err := api.UpdateSandbox(c.Context, &shoalv1.UpdateSandboxRequest{
				Workspace: a.workspace, Name: c.Args().First(), SetLabels: set, RemoveLabels: remove, ResourceVersion: c.Int64("if-version"),
			})
			if err != nil {
				return err
			}
			return a.out.sandbox(sb)
		},
	}
}

func (a *app) sandboxDelete() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete sandboxes",
		ArgsUsage: "NAME...",
		Description: `Marks each sandbox for deletion; the leader removes its container and record.
This succeeds whatever else updates the sandbox meanwhile. --if-uid and
--if-version make it apply only to the object you saw, so a stale delete
never removes a same-name replacement. A corrupt record (one that no longer
decodes) is removed by name too.

` + multiNameHelp,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "wait", Usage: "return when the records are gone"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * 60e9, Usage: "give up waiting after `DURATION`"},
			&cli.StringFlag{Name: "if-uid", Usage: "delete only if the sandbox has this `UID`"},
			&cli.Int64Flag{Name: "if-version", Usage: "delete only at this resource `VERSION`"},
			&cli.BoolFlag{Name: "ignore-not-found", Usage: "succeed for sandboxes that do not exist"},
		},
		Action: func(c *cli.Context) error {
			if (c.IsSet("if-uid") || c.IsSet("if-version")) && c.NArg() > 1 {
				// A uid or version describes one object; with several names
				// all but one would fail their precondition.
				return usageError("--if-uid and --if-version apply to one sandbox; give one NAME per command")
			}
			return a.forEachName(c, "sandbox", func(api shoalv1.ShoalClient, name string) error {
				var stop func(string)
				if c.Bool("wait") {
					stop = a.progress(fmt.Sprintf("deleting sandbox %s", name))
				}
				ctx, cancel := a.timeoutCtx(c)
				defer cancel()
				_, err := api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{
					Workspace: a.workspace, Name: name, Wait: c.Bool("wait"),
					Preconditions: &shoalv1.Preconditions{Uid: c.String("if-uid"), ResourceVersion: c.Int64("if-version")},
				})
				if stop != nil {
					stop("")
				}
				if err != nil {
					if c.Bool("ignore-not-found") && a.classify(err).code == ExitNotFound {
						return nil
					}
					return err
				}
				if c.Bool("wait") {
					fmt.Fprintf(a.stdout, "sandbox %s deleted\n", name)
				} else {
					fmt.Fprintf(a.stdout, "sandbox %s deleting\n", name)
				}
				return nil
			})
		},
	}
}

// createRetry bounds the retries of a create that failed UNAVAILABLE: 4
// calls, 200ms, 400ms and 800ms apart.
var createRetry = backoff.Policy{Initial: 200 * time.Millisecond, Max: 800 * time.Millisecond, Attempts: 4}

// execOutput writes the output chunks of an exec stream as they arrive and
// returns the command's exit code as an error (nil for 0). The last chunk
// carries the exit code and follows all output, so the output is complete
// once it arrives; a stream that ends without it is an error, never a
// success, since the output may be cut short.
func (a *app) execOutput(ctx context.Context, name string, stream interface {
	Recv() (*shoalv1.ExecChunk, error)
}) error {
	var exit *shoalv1.ExecChunk
	for exit == nil {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: ExitError, msg: "exec interrupted; the node stops the command when the call ends"}
			}
			return err
		}
		if chunk.Exited {
			exit = chunk
			break
		}
		w := a.stdout
		if chunk.Stream == "stderr" {
			w = a.stderr
		}
		if _, err := w.Write(chunk.Data); err != nil {
			return fmt.Errorf("exec: writing the command's %s: %w", chunk.Stream, err)
		}
	}
	if exit == nil {
		return &exitError{code: ExitError,
			msg:  fmt.Sprintf("exec in sandbox %s: the stream ended before the command's exit code arrived, so the output above may be incomplete", name),
			hint: "the connection or the node failed; the command may have run anyway. Check `shoal sandbox get " + name + "` and run it again if it is safe to"}
	}
	switch code := exit.ExitCode; {
	case exit.TimedOut:
		return &exitError{code: int(code), msg: "exec: the command ran out of its --timeout; its process group was killed"}
	case code == 0:
		return nil
	case code < 0 || code > 255:
		// A process exit status cannot carry it: 256 would read as 0.
		return &exitError{code: ExitError, msg: fmt.Sprintf("exec: the command ended with status %d, which no exit code can carry", code)}
	default:
		return &exitError{code: int(code)}
	}
}

func (a *app) sandboxLogs() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print a sandbox's output, or its egress events",
		ArgsUsage: "NAME",
		Description: `Prints what the sandbox's command wrote (stdout and stderr), and with
--follow what it writes next.

With --egress it prints the sandbox's egress events instead, oldest first, as
` + "`shoal sandbox events NAME`" + ` does: EgressApplied (its node enforces a new version
of its policy), EgressRefused (the node refused a connection: host, port and
why) and EgressAudited (audit mode let through one enforce would refuse).
Refused and audited connections are sampled: a burst is a few events, whose
messages say how many were left out, so count nothing by them. --tail N shows
the newest N, --follow the new ones as they come, -o json|yaml the events.

  shoal sandbox logs agent --tail 20 -f
  shoal sandbox logs agent --egress
  shoal sandbox logs agent --egress -f -o json`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming new output (with --egress: new events)"},
			&cli.IntFlag{Name: "tail", Usage: "only the last `N` lines (with --egress: events)"},
			&cli.BoolFlag{Name: "egress", Usage: "print the sandbox's egress events (EgressApplied, EgressRefused, EgressAudited; refused and audited ones sampled) instead of its output"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("egress") {
				return a.egressEvents(c)
			}
			api, err := a.dialArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			stream, err := api.Logs(c.Context, &shoalv1.LogsRequest{Workspace: a.workspace, Name: c.Args().First(), Follow: c.Bool("follow"), TailLines: int32(c.Int("tail"))})
			if err != nil {
				return err
			}
			return recvAll(c.Context, stream.Recv, func(chunk *shoalv1.LogsChunk) error {
				w := a.stdout
				if chunk.Stream == "stderr" {
					w = a.stderr
				}
				_, err := w.Write(chunk.Data)
				return err
			})
		},
	}
}

func (a *app) sandboxWatch() *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "stream sandbox changes",
		ArgsUsage: "[NAME]",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "since", Usage: "resume after resource `VERSION` (0: current state first)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError("sandbox watch takes [NAME]")
			}
			api, err := a.api()
			if err != nil {
				return err
			}
			stream, err := api.WatchSandboxes(c.Context, &shoalv1.WatchSandboxesRequest{Workspace: a.workspace, Name: c.Args().First(), ResourceVersion: c.Int64("since")})
			if err != nil {
				return err
			}
			return recvAll(c.Context, stream.Recv, func(ev *shoalv1.WatchEvent) error {
				if a.out.format != formatTable {
					return a.out.object(ev)
				}
				sb := ev.Sandbox
				_, err := fmt.Fprintf(a.stdout, "%-8s %-24s %-12s rv=%d\n", ev.Type, sb.GetMeta().GetName(),
					strings.TrimPrefix(sb.GetStatus().GetPhase().String(), "SANDBOX_PHASE_"), ev.ResourceVersion)
				return err
			})
		},
	}
}

func (a *app) sandboxAttach(attach bool) *cli.Command {
	name, usage := "attach", "attach a provider to a sandbox"
	if !attach {
		name, usage = "detach", "detach a provider from a sandbox"
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME PROVIDER",
		Description: `A running container keeps the environment it started with: attaching or
detaching changes which providers the sandbox holds (and so whether they can be
deleted), and applies to the container at its next start.`,
		Action: func(c *cli.Context) error {
			api, err := a.dialArgs(c, 2, "NAME PROVIDER")
			if err != nil {
				return err
			}
			var sb *shoalv1.Sandbox
			if attach {
				sb, err = api.AttachProvider(c.Context, &shoalv1.AttachProviderRequest{Workspace: a.workspace, Name: c.Args().Get(0), Provider: c.Args().Get(1)})
			} else {
				sb, err = api.DetachProvider(c.Context, &shoalv1.DetachProviderRequest{Workspace: a.workspace, Name: c.Args().Get(0), Provider: c.Args().Get(1)})
			}
			if err != nil {
				return err
			}
			return a.out.sandbox(sb)
		},
	}
}
