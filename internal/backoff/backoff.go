package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy is a backoff: the wait before retry n (counting from 0) is
// Initial·Multiplier^n, capped at Max, each spread by ±Jitter of itself.
// Attempts bounds the calls Retry makes (the first included); 0 is no
// bound (only the context ends it).
type Policy struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64 // 0 is 2
	Jitter     float64 // 0 to 1; 0 is none
	Attempts   int
}

// Validate names the field a bad policy got wrong.
func (p Policy) Validate() error {
	switch {
	case p.Initial <= 0:
		return fmt.Errorf("backoff: Initial: %s is not positive", p.Initial)
	case p.Max < p.Initial:
		return fmt.Errorf("backoff: Max: %s is below Initial (%s)", p.Max, p.Initial)
	case p.Multiplier != 0 && p.Multiplier < 1:
		return fmt.Errorf("backoff: Multiplier: %g is below 1", p.Multiplier)
	case p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("backoff: Jitter: %g is not between 0 and 1", p.Jitter)
	case p.Attempts < 0:
		return fmt.Errorf("backoff: Attempts: %d is negative", p.Attempts)
	}
	return nil
}

// Delay is the wait before retry n (0: the wait after the first call
// failed).
func (p Policy) Delay(n int) time.Duration {
	m := p.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(p.Initial)
	for i := 0; i < n && d < float64(p.Max); i++ {
		d *= m
	}
	d = min(d, float64(p.Max))
	if p.Jitter > 0 {
		d *= 1 + p.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}

// permanent marks an error Retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Retry returns it at once (unwrapped). A nil
// err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// ErrExhausted is wrapped by Retry's error when the attempts ran out.
var ErrExhausted = errors.New("backoff: attempts exhausted")

// Retry calls f (with the attempt, from 1) until it returns nil, waiting
// p.Delay between calls. It stops early on a Permanent error (returned
// unwrapped) and when ctx ends (the context's error joined with f's last
// error). When p.Attempts calls all failed, the error wraps ErrExhausted
// and f's last error.
func Retry(ctx context.Context, p Policy, f func(attempt int) error) error {
	if err := p.Validate(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := f(attempt)
		if err == nil {
			return nil
		}
		if pe, ok := err.(permanent); ok {
			return pe.err
		}
		if errors.As(err, new(permanent)) {
			return err
		}
		if p.Attempts > 0 && attempt >= p.Attempts {
			return fmt.Errorf("%w (%d): %w", ErrExhausted, attempt, err)
		}
		if serr := Sleep(ctx, p.Delay(attempt-1)); serr != nil {
			return errors.Join(serr, err)
		}
	}
}

// Sleep waits d, or until ctx ends (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
