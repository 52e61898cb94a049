package agent

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"shoal/events"
	"shoal/internal/backoff"
)

func TestTruncateKeepsUTF8AndTheBound(t *testing.T) {
	for _, s := range []string{strings.Repeat("é", 1000), strings.Repeat("x", 5000), "short"} {
		got := events.Truncate(s, MaxMessageBytes)
		if len(got) > MaxMessageBytes || !utf8.ValidString(got) {
			t.Fatalf("truncate of %d bytes: %d bytes, valid UTF-8 %v", len(s), len(got), utf8.ValidString(got))
		}
		if len(s) <= MaxMessageBytes && got != s {
			t.Fatalf("a short message was changed: %q", got)
		}
	}
}

func TestBackoffDoublesAndStartsOverAfterAHealthyStream(t *testing.T) {
	b := &streamBackoff{p: backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second}}
	now := time.Now()
	var got []time.Duration
	for range 6 {
		b.opened(now)
		got = append(got, b.next(now))
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v; want %v ms", got, want)
		}
	}
	b.opened(now)
	if d := b.next(now.Add(2 * time.Second)); d != b.p.Initial {
		t.Fatalf("after a stream that held for longer than max: %s, want %s", d, b.p.Initial)
	}
}
