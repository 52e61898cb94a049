package lab

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	shoalcli "shoal/cli"
)

// Main runs shoal-lab and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return shoalcli.RunTool(ctx, args, stdin, stdout, stderr, shoalcli.ToolSpec{
		Name:  "shoal-lab",
		Usage: "what proves shoal: the chaos suite, the soak and the fleet bench",
		Description: `shoal-lab starts shoal nodes (the shoal binary: --shoal-binary, else the one
next to shoal-lab, else shoal on PATH), drives them and checks or measures
what they do. make build builds bin/shoal and bin/shoal-lab side by side.`,
		Commands: func(t *shoalcli.Tool) []*cli.Command {
			return []*cli.Command{chaosCmd(t), benchCmd(t)}
		},
	})
}
