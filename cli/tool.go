package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// ToolSpec is a binary built on this CLI's conventions: shoal-lab (package
// lab) is one. RunTool gives its commands the global flags, the argument
// reordering, the error printing and exit codes, and the version command
// of `shoal`, so that the two binaries behave alike without a second copy.
type ToolSpec struct {
	// Name of the binary, as in its --help and `NAME version`.
	Name, Usage string
	// Description of the binary's --help; RunTool adds the lines on flag
	// order and exit codes.
	Description string
	// Commands builds the binary's commands. Their actions report errors
	// with UsageError and Failure (any other error exits 1 with its text).
	Commands func(*Tool) []*cli.Command
}

// Tool is what a ToolSpec's commands may read of the CLI: the writers and
// what the global flags chose. The accessors are meant for actions, after
// the global flags are parsed.
type Tool struct{ a *app }

// Stdout is where a command's results go.
func (t *Tool) Stdout() io.Writer { return t.a.stdout }

// Stderr is where progress, errors and hints go.
func (t *Tool) Stderr() io.Writer { return t.a.stderr }

// TTY reports whether Stderr is a terminal (progress bars then; plain
// lines otherwise).
func (t *Tool) TTY() bool { return t.a.tty }

// Endpoint is the node addresses of --endpoint, SHOAL_ENDPOINT or the
// config file's context, as `shoal` would dial them.
func (t *Tool) Endpoint() string { return t.a.endpoint }

// RunTool runs spec's command tree and returns the process exit code, as
// Main does for `shoal`.
func RunTool(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, spec ToolSpec) int {
	spec.Description += `

Flags may come before or after positional arguments.

Exit codes: 0 ok, 1 failure, 2 invalid input or usage; the others as
` + "`shoal --help`" + ` lists them.`
	return run(ctx, args, stdin, stdout, stderr, spec)
}

// UsageError is a command's bad input: exit 2 (ExitUsage), printed with a
// hint to see --help.
func UsageError(format string, a ...any) error { return usageError(format, a...) }

// Failure is a command that ran and failed: exit 1 (ExitError), printed as
// is.
func Failure(format string, a ...any) error {
	return &exitError{code: ExitError, msg: fmt.Sprintf(format, a...)}
}

// movedToLab stands where a command of `shoal` was before it moved to
// shoal-lab: it takes any arguments and says where the command went.
func movedToLab(name string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           "moved to shoal-lab",
		Hidden:          true,
		HideHelp:        true,
		SkipFlagParsing: true,
		Action: func(*cli.Context) error {
			return &exitError{code: ExitUsage,
				msg:  fmt.Sprintf("`shoal %s` moved to `shoal-lab %s` (make build builds bin/shoal-lab)", name, name),
				hint: fmt.Sprintf("the flags are the same; `shoal-lab %s --help` lists them", name)}
		},
	}
}

// Extension is a command another package adds to `shoal`'s tree, so that
// this package need not link what the command runs: cmd/shoal-node adds
// the commands that run a node (package nodecmd), which link the server,
// and cmd/shoal adds NodeCommands in their place, so the CLI stays a
// client of the API alone. Parent is the path of the
// command it goes under ({"node"}, {"cluster", "snapshot"}); the command
// is appended to that command's subcommands.
type Extension struct {
	Parent  []string
	Command func(*Tool) *cli.Command
}

// extend appends each extension's command under its parent in cmds. A
// parent that does not exist is a bug of the binary's wiring: it panics
// at once, in every run, rather than dropping a command.
func extend(t *Tool, cmds []*cli.Command, exts []Extension) []*cli.Command {
	for _, e := range exts {
		var parent *cli.Command
		level := cmds
		for _, name := range e.Parent {
			parent = nil
			for _, c := range level {
				if c.Name == name {
					parent = c
					break
				}
			}
			if parent == nil {
				panic(fmt.Sprintf("cli: extension parent %q: no command %q", e.Parent, name))
			}
			level = parent.Subcommands
		}
		if parent == nil {
			panic("cli: an extension needs a parent command")
		}
		parent.Subcommands = append(parent.Subcommands, e.Command(t))
	}
	return cmds
}

// Structured reports whether -o asks for json or yaml rather than a table.
func (t *Tool) Structured() bool { return t.a.out.format != formatTable }

// PrintFields prints fields as one object in the -o format (json or yaml):
// the machine-readable result of a command whose table output is prose.
// The values must be plain (strings, numbers, bools, and maps and slices
// of them).
func (t *Tool) PrintFields(fields map[string]any) error {
	return t.a.out.object(mustStruct(fields))
}

// Exit is an error that exits with code, printed as msg and, if not
// empty, hint (Failure and UsageError are the common cases).
func Exit(code int, msg, hint string) error {
	return &exitError{code: code, msg: msg, hint: hint}
}

// ExactArgs checks the positional argument count as every command of
// `shoal` does: a usage error naming what the command takes ("FILE").
func ExactArgs(c *cli.Context, n int, names string) error { return exactArgs(c, n, names) }

// ParseKV parses repeated KEY=VALUE flag values; field names the flag in
// errors, which are usage errors.
func ParseKV(field string, vals []string) (map[string]string, error) { return parseKV(field, vals) }
