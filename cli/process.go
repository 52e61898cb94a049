package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// RunProcess is the whole main of each shoal binary (shoal, shoal-node,
// shoal-lab): it runs run with a context that ends on the first SIGINT or
// SIGTERM (a graceful shutdown: a node resigns and stops, a watch or an exec
// ends, a chaos run cleans up what it started), exits at once with 130 on
// a second, and exits with run's code.
func RunProcess(run func(ctx context.Context) int) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		cancel()
		<-sig
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(130)
	}()
	code := run(ctx)
	cancel()
	os.Exit(code)
}
