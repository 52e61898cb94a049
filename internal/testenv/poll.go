package testenv

import (
	"testing"
	"time"
)

// Cond is a condition Eventually polls: it holds when it returns true, or
// a nil error; the last error it gave is in the failure.
type Cond interface {
	func() bool | func() error | func() (bool, error)
}

// PollInterval is how often Eventually asks.
const PollInterval = 20 * time.Millisecond

// Eventually polls cond every PollInterval until it holds, and fails the
// test (naming what, and cond's last error) when within passes first.
// It is the one poll-until-deadline helper of shoal's tests.
func Eventually[C Cond](t testing.TB, within time.Duration, what string, cond C) {
	t.Helper()
	check := func() (bool, error) {
		switch c := any(cond).(type) {
		case func() bool:
			return c(), nil
		case func() error:
			err := c()
			return err == nil, err
		case func() (bool, error):
			return c()
		}
		panic("unreachable")
	}
	deadline := time.Now().Add(within)
	for {
		ok, err := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("%s: not true within %s (last error: %v)", what, within, err)
			}
			t.Fatalf("%s: not true within %s", what, within)
		}
		<-time.After(PollInterval)
	}
}
