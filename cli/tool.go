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
