// Command shoal-lab is shoal's chaos suite, soak and fleet bench. See
// package lab.
package main

import (
	"context"
	"os"

	"shoal/cli"
	"shoal/lab"
)

func main() {
	cli.RunProcess(func(ctx context.Context) int {
		return lab.Main(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	})
}
