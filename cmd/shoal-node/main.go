// Command shoal-node is the shoal server: `shoal`'s command tree (package
// cli) with the commands that run a node in it (package nodecmd). `shoal
// node start` and `shoal cluster snapshot restore` run this binary; it
// answers every other shoal command too, so a node image needs no other.
package main

import (
	"context"
	"os"

	"shoal/cli"
	"shoal/nodecmd"
)

func main() {
	cli.RunProcess(func(ctx context.Context) int {
		return cli.Main(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, nodecmd.Commands()...)
	})
}
