package testenv_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"shoal/internal/testenv"
)

func TestEventuallyTakesEveryConditionShape(t *testing.T) {
	n := 0
	testenv.Eventually(t, time.Second, "bool", func() bool { n++; return n >= 3 })
	n = 0
	testenv.Eventually(t, time.Second, "error", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	n = 0
	testenv.Eventually(t, time.Second, "bool and error", func() (bool, error) { n++; return n >= 3, nil })
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, a ...any) {
	f.msg = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

func TestEventuallyFailsNamingWhatAndTheLastError(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Eventually(f, 50*time.Millisecond, "the thing", func() error { return errors.New("still broken") })
		f.msg = "returned"
	}()
	<-done
	if !strings.Contains(f.msg, "the thing: not true within 50ms") || !strings.Contains(f.msg, "still broken") {
		t.Fatalf("failure %q; want what, the bound and the last error", f.msg)
	}
}
