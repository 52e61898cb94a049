package docker

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"shoal"
)

func TestScrubRemovesEveryFormOfASecret(t *testing.T) {
	secret := "k3y\x00\"é"
	for _, text := range []string{
		"raw " + secret,
		`go-quoted "A=k3y\x00\"é"`,
		`json "k3y\u0000\"é"`,
	} {
		err := scrub(shoal.FailedPrecondition("Docker said: %s", text), []string{secret})
		if shoal.KindOf(err) != shoal.KindFailedPrecondition {
			t.Fatalf("scrub lost the error's kind: %v", err)
		}
		if strings.Contains(err.Error(), "k3y") || !strings.Contains(err.Error(), Redacted) {
			t.Fatalf("scrub(%q) = %q", text, err)
		}
	}
	plain := errors.New("nothing secret here")
	if scrub(plain, []string{secret}) != plain {
		t.Fatal("scrub changed an error without secrets")
	}
	if got := redactAll("TOKEN=abc and abc", envSecrets([]string{"TOKEN=abc", "LONG=abcdefgh"})); got != Redacted+" and abc" {
		t.Fatalf("env redaction: %q", got)
	}
}

// The wrapper's pid line may arrive in pieces, and with output after it.
func TestPidWriterSplitsThePidLineOff(t *testing.T) {
	var out bytes.Buffer
	pw := &pidWriter{w: &out, known: make(chan struct{})}
	for _, p := range []string{"4", "2", "\nhel", "lo\n"} {
		if _, err := pw.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-pw.known:
	default:
		t.Fatal("pid not known after its line")
	}
	if pw.pid != 42 || out.String() != "hello\n" {
		t.Fatalf("pid %d, output %q", pw.pid, out.String())
	}
	bad := &pidWriter{w: &out, known: make(chan struct{})}
	if _, err := bad.Write([]byte("OCI runtime exec failed: no /bin/sh\n")); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Fatalf("a first line that is no pid: %v", err)
	}
}

// Two secrets that overlap in the text are hidden whole: no part of
// either is left in the clear (found in review: the longer one was
// replaced first and broke the shorter apart).
func TestRedactOverlappingSecrets(t *testing.T) {
	a, b := "/AAAAAAAAAAX", "XBBBBBBBBBSECRETB"
	got := redactAll(`exec: "/AAAAAAAAAAXBBBBBBBBBSECRETB": not found`, []string{a, b})
	if want := `exec: "` + Redacted + `": not found`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A container is made again at a start only when its environment is not
// the one wanted: a wanted variable missing or different, or one of its
// own set that is neither wanted nor its image's (a dropped credential).
func TestEnvStale(t *testing.T) {
	image := []string{"PATH=/bin", "LANG=C"}
	for _, c := range []struct {
		name       string
		have, want []string
		stale      bool
	}{
		{"the same", []string{"PATH=/bin", "LANG=C", "K=v"}, []string{"K=v"}, false},
		{"a spec value over the image's", []string{"PATH=/x", "LANG=C"}, []string{"PATH=/x"}, false},
		{"rotated", []string{"PATH=/bin", "LANG=C", "K=v"}, []string{"K=w"}, true},
		{"attached", []string{"PATH=/bin", "LANG=C", "K=v"}, []string{"K=v", "Q=q"}, true},
		{"detached", []string{"PATH=/bin", "LANG=C", "K=v", "Q=q"}, []string{"K=v"}, true},
		{"blanked by an earlier refresh", []string{"PATH=/bin", "LANG=C", "K=v", "Q="}, []string{"K=v"}, false},
		{"an image value left out of want", []string{"PATH=/bin", "LANG=C"}, nil, false},
	} {
		if got := envStale(c.have, image, c.want); got != c.stale {
			t.Errorf("%s: envStale = %v, want %v", c.name, got, c.stale)
		}
	}
	got := strings.Join(blankedEnv([]string{"PATH=/x", "LANG=C", "K=secret", "Q=", "K=again"}, image), " ")
	if got != "PATH=/bin LANG=C K= Q=" {
		t.Errorf("blankedEnv = %q", got)
	}
}
