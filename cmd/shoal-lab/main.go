// Command shoal-lab is shoal's chaos suite, soak and fleet bench. See
// package lab.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"shoal/lab"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// First signal: graceful shutdown (the run cleans up what it
		// started). Second: exit at once.
		<-sig
		cancel()
		<-sig
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(130)
	}()
	code := lab.Main(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
