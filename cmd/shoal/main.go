// Command shoal is the shoal CLI, a client of the shoal.v1 API (package
// cli). It links none of the server: `shoal node start` and `shoal cluster
// snapshot restore` run shoal-node, the server binary (cmd/shoal-node),
// found beside this one or on PATH.
package main

import (
	"context"
	"os"

	"shoal/cli"
)

func main() {
	cli.RunProcess(func(ctx context.Context) int {
		return cli.Main(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, cli.NodeCommands()...)
	})
}
