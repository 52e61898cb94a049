package backoff_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"shoal/internal/backoff"
)

func TestDelayGrowsToMaxAndJitterStaysInBounds(t *testing.T) {
	p := backoff.Policy{Initial: 10 * time.Millisecond, Max: 70 * time.Millisecond}
	for n, want := range []time.Duration{10, 20, 40, 70, 70, 70} {
		if got := p.Delay(n); got != want*time.Millisecond {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want*time.Millisecond)
		}
	}
	if got := p.Delay(1 << 20); got != 70*time.Millisecond {
		t.Errorf("Delay of a huge n = %s, want Max", got)
	}
	p.Multiplier, p.Jitter = 1.5, 0.5
	for range 100 {
		if d := p.Delay(1); d < 7500*time.Microsecond || d > 22500*time.Microsecond {
			t.Fatalf("Delay(1) with jitter 0.5 of 15ms = %s, outside [7.5ms, 22.5ms]", d)
		}
	}
}

func TestRetryStopsAtSuccessPermanentExhaustionOrContext(t *testing.T) {
	p := backoff.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 3}
	boom := errors.New("boom")
	tests := []struct {
		name      string
		ctx       func() context.Context
		fail      int // calls that fail before one succeeds
		permanent bool
		wantCalls int
		wantErr   []error
	}{
		{name: "succeeds after two failures", fail: 2, wantCalls: 3},
		{name: "exhausted", fail: 10, wantCalls: 3, wantErr: []error{backoff.ErrExhausted, boom}},
		{name: "permanent", fail: 10, permanent: true, wantCalls: 1, wantErr: []error{boom}},
		{name: "context ended", fail: 10, wantCalls: 1, wantErr: []error{context.Canceled, boom},
			ctx: func() context.Context { c, cancel := context.WithCancel(context.Background()); cancel(); return c }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			calls := 0
			err := backoff.Retry(ctx, p, func(attempt int) error {
				calls++
				if attempt != calls {
					t.Fatalf("attempt %d on call %d", attempt, calls)
				}
				if calls <= tc.fail {
					if tc.permanent {
						return backoff.Permanent(boom)
					}
					return boom
				}
				return nil
			})
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			for _, w := range tc.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("err = %v, want it to wrap %v", err, w)
				}
			}
		})
	}
}

func TestRetryRejectsABadPolicyNamingTheField(t *testing.T) {
	err := backoff.Retry(context.Background(), backoff.Policy{Initial: time.Second, Max: time.Millisecond}, func(int) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "Max") {
		t.Fatalf("err = %v, want one naming Max", err)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
