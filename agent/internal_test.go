package agent

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
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

// A socket path longer than a socket address holds is listened on through
// its directory's descriptor: the socket is at the path, answers there,
// and is gone when the listener is closed.
func TestListenUnixOnALongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s")
	if len(path) <= maxSocketPath {
		t.Fatalf("path %d bytes: the test needs one longer than %d", len(path), maxSocketPath)
	}
	ln, d, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket at its path: %v, %v", fi, err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = c.Write([]byte("ok"))
			c.Close()
		}
		done <- err
	}()
	c, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/s", d.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "ok" || <-done != nil {
		t.Fatalf("through the long path's socket: %q, %v", b, err)
	}
	ln.Close()
	closeDir(d)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after the listener closed: %v; want it removed", err)
	}
}
