// Command shoal is the shoal CLI and server. See package cli, and
// package nodecmd for the commands that run a node.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"shoal/cli"
	"shoal/nodecmd"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// First signal: graceful shutdown. Second: exit at once.
		<-sig
		cancel()
		<-sig
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(130)
	}()
	code := cli.Main(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, nodecmd.Commands()...)
	cancel()
	os.Exit(code)
}
