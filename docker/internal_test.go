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
