package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
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
		runHardExit()
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(130)
	}()
	code := run(ctx)
	cancel()
	os.Exit(code)
}

// hardExit are what must be undone even when a second signal exits the
// process at once (exec -it's raw terminal), by registration.
var hardExit struct {
	sync.Mutex
	next  int
	funcs map[int]func()
}

// onHardExit registers f to run before a second signal's exit; call the
// returned func to unregister it (once f's work is undone the normal way).
func onHardExit(f func()) (unregister func()) {
	hardExit.Lock()
	defer hardExit.Unlock()
	if hardExit.funcs == nil {
		hardExit.funcs = map[int]func(){}
	}
	id := hardExit.next
	hardExit.next++
	hardExit.funcs[id] = f
	return func() {
		hardExit.Lock()
		defer hardExit.Unlock()
		delete(hardExit.funcs, id)
	}
}

func runHardExit() {
	hardExit.Lock()
	defer hardExit.Unlock()
	for _, f := range hardExit.funcs {
		f()
	}
}
