package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"google.golang.org/protobuf/types/known/durationpb"

	shoalv1 "shoal/api/shoal/v1"
)

// Exec in a sandbox: one-shot (Exec, output only), or interactive
// (ExecInteractive: stdin streamed with -i, a terminal with -t, as docker
// exec and kubectl exec have them). The node forwards either to the
// sandbox's owner and kills the command's process group when the call
// ends early.

// execOptionFlags are the options of every exec (exec and shell).
func execOptionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "workdir", Usage: "run in directory `DIR` (absolute; default: the image's). No -w: that is --workspace, as in every shoal command"},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "add environment `KEY=VALUE` for this command, repeatable"},
		&cli.DurationFlag{Name: "timeout", Usage: "kill the command's process group after `DURATION` and exit 124, as timeout(1)"},
		&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run as `UID[:GID]` (numbers; default: the image's user)"},
	}
}

func (a *app) sandboxExec() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a sandbox",
		ArgsUsage: "NAME -- CMD ARGS...",
		Description: `Runs the command in the sandbox's container and prints its output as it
arrives: the command's stdout to stdout, its stderr to stderr. There is no
limit on the output's size. shoal exits with the command's exit code; if the
connection ends before that code arrives, shoal says so and exits 1 (the
output may then be incomplete).

-i streams standard input to the command, with no size limit, until its
EOF. -t runs the command on a terminal; with -i too, the local terminal is
put in raw mode (keys such as Ctrl-C go to the command) and restored when
shoal exits, and window size changes follow. The command is killed with its
process group when shoal is interrupted or loses its connection.

  shoal sandbox exec agent -- env
  shoal sandbox exec agent -- sh -c 'cat big.log' > big.log
  tar c . | shoal sandbox exec -i agent -- tar x -C /tmp
  shoal sandbox exec -it agent -- sh
  shoal sandbox exec agent --workdir /tmp --env MODE=x --timeout 30s -- ./job`,
		UseShortOptionHandling: true,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "stream standard input to the command (no size limit)"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal (with -i: raw mode, window resizes)"},
		}, execOptionFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError("sandbox exec takes NAME -- CMD ARGS...")
			}
			return a.exec(c, c.Args().First(), c.Args().Tail(), c.Bool("stdin"), c.Bool("tty"))
		},
	}
}

func (a *app) sandboxShell() *cli.Command {
	return &cli.Command{
		Name:      "shell",
		Usage:     "open an interactive shell in a sandbox (exec -it NAME -- sh)",
		ArgsUsage: "NAME",
		Description: `Runs sh in the sandbox on a terminal, with this terminal in raw mode:
the same as shoal sandbox exec -it NAME -- sh. shoal exits with the shell's
exit code.

  shoal sandbox shell agent
  shoal sandbox shell agent --workdir /tmp --user 1000`,
		Flags: execOptionFlags(),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			return a.exec(c, c.Args().First(), []string{"sh"}, true, true)
		},
	}
}

// exec runs cmd in sandbox name with the options of c's flags.
func (a *app) exec(c *cli.Context, name string, cmd []string, stdin, tty bool) error {
	env, err := parseKV("--env", c.StringSlice("env"))
	if err != nil {
		return err
	}
	req := &shoalv1.ExecRequest{Workspace: a.workspace, Name: name, Command: cmd,
		Workdir: c.String("workdir"), Env: env, User: c.String("user"), Tty: tty}
	if d := c.Duration("timeout"); d != 0 {
		if d < 0 {
			return usageError("--timeout: %s is negative", d)
		}
		req.Timeout = durationpb.New(d)
	}
	var in *os.File
	if stdin && tty {
		f, ok := a.stdin.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return usageError("-t with -i: standard input is not a terminal; drop -t to stream it (-i alone)")
		}
		in = f
	}
	api, err := a.api()
	if err != nil {
		return err
	}
	// Cancelled on return: execOutput stops reading at the exit code, and
	// the cancel releases the rest of the call.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	// Options go by ExecInteractive: a node of an older version would
	// ignore them on Exec (and run the command as the image's user, with
	// no deadline); on ExecInteractive it answers UNIMPLEMENTED instead.
	options := req.Workdir != "" || len(req.Env) > 0 || req.Timeout != nil || req.User != ""
	if !stdin && !tty && !options {
		stream, err := api.Exec(ctx, req)
		if err != nil {
			return err
		}
		return a.execOutput(ctx, name, stream)
	}
	sizeFd := -1
	if in != nil {
		sizeFd = int(in.Fd())
	} else if f, ok := a.stdout.(*os.File); ok && tty && term.IsTerminal(int(f.Fd())) {
		sizeFd = int(f.Fd())
	}
	if sizeFd >= 0 {
		if cols, rows, err := term.GetSize(sizeFd); err == nil && rows > 0 && cols > 0 {
			req.TerminalSize = &shoalv1.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}
		}
	}
	stream, err := api.ExecInteractive(ctx)
	if err != nil {
		return err
	}
	s := &execSender{stream: stream}
	if err := s.send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_Start{Start: req}}); err != nil {
		return a.execOutput(ctx, name, stream) // the server ended the call: its status says why
	}
	if in != nil {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("exec -it: raw mode for the terminal: %w", err)
		}
		// Restored on every return; an interrupt (SIGTERM, SIGINT) ends
		// ctx, so the call, so this function; a second one exits at once,
		// and restores it first (RunProcess).
		restore := func() { _ = term.Restore(int(in.Fd()), old) }
		defer restore()
		defer onHardExit(restore)()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: ends the resize loop
	if sizeFd >= 0 && tty {
		wg.Go(func() { s.resizes(ctx, sizeFd) })
	}
	if !stdin {
		// No -i: the command reads an empty stdin, as on Exec.
		if err := s.send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_CloseStdin{CloseStdin: true}}); err != nil {
			return a.execOutput(ctx, name, stream)
		}
		if !tty {
			_ = s.closeSend() // and nothing else will be sent (no resizes)
		}
	}
	if stdin {
		// Not waited for: a read from a terminal cannot be interrupted, so
		// this copy may outlive the call, blocked in Read until the
		// process exits. It sends nothing once the call has ended.
		go s.copyStdin(a.stdin, !tty)
	}
	return a.execOutput(ctx, name, stream)
}

// execSender serializes the messages of an ExecInteractive call: stdin
// and resizes come from two goroutines, and a gRPC stream takes one
// sender at a time.
type execSender struct {
	mu     sync.Mutex
	stream shoalv1.Shoal_ExecInteractiveClient
}

func (s *execSender) send(m *shoalv1.ExecInput) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.Send(m)
}

// stdinChunk is the most stdin one message carries.
const stdinChunk = 256 << 10

// closeSend ends the sending side of the call: nothing else will be sent.
func (s *execSender) closeSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.CloseSend()
}

// copyStdin sends r as stdin until its EOF, then closes the command's
// stdin (and, with closeSend, the sending side of the call: nothing else
// will be sent).
func (s *execSender) copyStdin(r io.Reader, closeSend bool) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if s.send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
				return // the call has ended: the output side says how
			}
		}
		if err != nil { // EOF, or stdin failed: either way it has ended
			_ = s.send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_CloseStdin{CloseStdin: true}})
			if closeSend {
				_ = s.closeSend()
			}
			return
		}
	}
}

// resizes sends the terminal's size each time it changes (SIGWINCH)
// until ctx ends.
func (s *execSender) resizes(ctx context.Context, fd int) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			cols, rows, err := term.GetSize(fd)
			if err != nil || rows <= 0 || cols <= 0 {
				continue
			}
			if s.send(&shoalv1.ExecInput{Input: &shoalv1.ExecInput_Resize{Resize: &shoalv1.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}}}) != nil {
				return
			}
		}
	}
}
