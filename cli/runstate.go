package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// sandbox stop, start and restart (apiserver/runstate.go).

const runStateHelp = `The sandbox keeps its container, its files, its node and its capacity slot
while it is stopped; start runs the same container again, with the environment
it was created with. Stopping a stopped sandbox and starting a running one
succeed and change nothing.

With --wait the command returns once the owning node has acted: stop when the
sandbox is STOPPED; start when it is READY (0), or STOPPED because its command
ended at once (1 if with a nonzero code) or ERROR (4).`

func (a *app) sandboxStop() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop sandboxes, keeping their containers and files",
		ArgsUsage: "NAME...",
		Description: `Stops each sandbox's container as docker stop does: SIGTERM, then SIGKILL
after --grace. Its phase goes STOPPING, then STOPPED with the exit code and the
condition Stopped (reason StopRequested).

  shoal sandbox stop agent --wait
  shoal sandbox stop agent --grace 0          # SIGKILL at once

` + runStateHelp + "\n\n" + multiNameHelp,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "grace", Aliases: []string{"t"}, Value: "10s", Usage: "wait `DURATION` between SIGTERM and SIGKILL (at most 1h; a bare number is seconds, as docker stop -t)"},
			&cli.BoolFlag{Name: "wait", Usage: "return when the sandbox is STOPPED"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up waiting after `DURATION`"},
			&cli.Int64Flag{Name: "if-version", Usage: "stop only at this resource `VERSION`"},
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("if-version") && c.NArg() > 1 {
				return usageError("--if-version applies to one sandbox; give one NAME per command")
			}
			grace, err := graceFlag(c)
			if err != nil {
				return err
			}
			return a.forEachName(c, "sandbox", func(api shoalv1.ShoalClient, name string) error {
				return a.runState(c, name, true, func() (*shoalv1.Sandbox, error) {
					ctx, cancel := a.timeoutCtx(c)
					defer cancel()
					return api.StopSandbox(ctx, &shoalv1.StopSandboxRequest{
						Workspace: a.workspace, Name: name, Wait: c.Bool("wait"),
						Grace: durationpb.New(grace), ResourceVersion: c.Int64("if-version"),
					})
				})
			})
		},
	}
}

func (a *app) sandboxStart() *cli.Command {
	return &cli.Command{
		Name:      "start",
		Usage:     "start stopped sandboxes again",
		ArgsUsage: "NAME...",
		Description: `Starts each stopped sandbox's container again (docker start of the same
container): its phase goes STARTING, then READY. A sandbox whose command had
exited by itself runs it again; one in phase ERROR cannot be started (delete
it and create it again).

  shoal sandbox start agent --wait

` + runStateHelp + "\n\n" + multiNameHelp,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "wait", Usage: "return when the sandbox is READY, or has stopped or failed first"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up waiting after `DURATION`"},
			&cli.Int64Flag{Name: "if-version", Usage: "start only at this resource `VERSION`"},
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("if-version") && c.NArg() > 1 {
				return usageError("--if-version applies to one sandbox; give one NAME per command")
			}
			return a.forEachName(c, "sandbox", func(api shoalv1.ShoalClient, name string) error {
				return a.runState(c, name, false, func() (*shoalv1.Sandbox, error) {
					ctx, cancel := a.timeoutCtx(c)
					defer cancel()
					return api.StartSandbox(ctx, &shoalv1.StartSandboxRequest{
						Workspace: a.workspace, Name: name, Wait: c.Bool("wait"), ResourceVersion: c.Int64("if-version"),
					})
				})
			})
		},
	}
}

func (a *app) sandboxRestart() *cli.Command {
	return &cli.Command{
		Name:      "restart",
		Usage:     "stop sandboxes, then start them again",
		ArgsUsage: "NAME...",
		Description: `Stops each sandbox (waiting until it is STOPPED), then starts the same
container again: shoal sandbox stop --wait, then shoal sandbox start. Its files
are kept; the container's environment is the one it was created with.

  shoal sandbox restart agent --wait

` + runStateHelp + "\n\n" + multiNameHelp,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "grace", Aliases: []string{"t"}, Value: "10s", Usage: "wait `DURATION` between SIGTERM and SIGKILL (at most 1h; a bare number is seconds, as docker stop -t)"},
			&cli.BoolFlag{Name: "wait", Usage: "return when the sandbox is READY again, or has stopped or failed first"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up waiting after `DURATION` (the stop and the start together)"},
		},
		Action: func(c *cli.Context) error {
			grace, err := graceFlag(c)
			if err != nil {
				return err
			}
			return a.forEachName(c, "sandbox", func(api shoalv1.ShoalClient, name string) error {
				ctx, cancel := a.timeoutCtx(c)
				defer cancel()
				sb, err := api.StopSandbox(ctx, &shoalv1.StopSandboxRequest{
					Workspace: a.workspace, Name: name, Wait: true, Grace: durationpb.New(grace),
				})
				if err != nil {
					return err
				}
				// Start only what this stop stopped: a start at the run
				// generation the stop returned, so that another stop or
				// start meanwhile is not undone behind its back (a label
				// written meanwhile changes nothing).
				return a.runState(c, name, false, func() (*shoalv1.Sandbox, error) {
					return api.StartSandbox(ctx, &shoalv1.StartSandboxRequest{
						Workspace: a.workspace, Name: name, Wait: c.Bool("wait"), RunGeneration: sb.GetSpec().GetRunGeneration(),
					})
				})
			})
		},
	}
}

// graceFlag is --grace: a duration, or a bare number of seconds (docker
// stop -t's habit), from 0 to shoal.MaxStopGrace.
func graceFlag(c *cli.Context) (time.Duration, error) {
	v := c.String("grace")
	g, err := time.ParseDuration(v)
	if n, nerr := strconv.Atoi(v); nerr == nil {
		g, err = time.Duration(n)*time.Second, nil
	}
	if err != nil {
		return 0, usageError("--grace: %q is not a duration (10s, 1m) or a number of seconds", v)
	}
	if g < 0 || g > shoal.MaxStopGrace {
		return 0, usageError("--grace: %s is out of range: 0 (SIGKILL at once) to %s", g, shoal.MaxStopGrace)
	}
	return g, nil
}

// runState makes one stop or start call and prints its outcome: the
// sandbox in -o json|yaml, a line otherwise. A start waited for exits by
// the phase it ended in, as create --wait does.
func (a *app) runState(c *cli.Context, name string, stop bool, call func() (*shoalv1.Sandbox, error)) error {
	wait := c.Bool("wait")
	var done func(string)
	if wait {
		what := "starting"
		if stop {
			what = "stopping"
		}
		done = a.progress(fmt.Sprintf("%s sandbox %s", what, name))
	}
	sb, err := call()
	if done != nil {
		done("")
	}
	if err != nil {
		return err
	}
	if a.out.format != formatTable {
		if err := a.out.sandbox(sb); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "sandbox %s %s\n", name, runStateLine(sb, stop, wait))
	}
	if wait && !stop {
		return waitOutcome(sb)
	}
	return nil
}

func runStateLine(sb *shoalv1.Sandbox, stop, wait bool) string {
	st := sb.GetStatus()
	done := sb.RunStateReached()
	switch {
	case !wait && stop && done && st.GetPhase() == shoalv1.SandboxPhase_STOPPED:
		return "already stopped"
	case !wait && !stop && done && st.GetPhase() == shoalv1.SandboxPhase_READY:
		return "already running"
	case !wait && stop:
		return "stopping"
	case !wait:
		return "starting"
	case st.GetPhase() == shoalv1.SandboxPhase_STOPPED:
		return fmt.Sprintf("stopped (exit code %d)", st.GetExitCode())
	case st.GetPhase() == shoalv1.SandboxPhase_READY:
		return "started"
	}
	return "is " + st.GetPhase().String()
}
