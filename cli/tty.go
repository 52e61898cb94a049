package cli

import (
	"fmt"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
)

func isTTY(fd uintptr) bool { return isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd) }

// progress shows a spinner on a TTY and plain lines otherwise, while a wait
// is in progress. stop ends it and waits for its goroutine.
func (a *app) progress(what string) (stop func(result string)) {
	if !a.tty {
		fmt.Fprintf(a.stderr, "%s...\n", what)
		return func(result string) {
			if result != "" {
				fmt.Fprintln(a.stderr, result)
			}
		}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(a.stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionClearOnFinish(),
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = bar.Add(1)
			}
		}
	}()
	var once sync.Once
	return func(result string) {
		once.Do(func() {
			close(done)
			wg.Wait()
			_ = bar.Finish()
			if result != "" {
				fmt.Fprintln(a.stderr, result)
			}
		})
	}
}
