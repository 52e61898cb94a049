package encryption

import (
	"regexp"
	"strings"
	"testing"
)

// validKeyName accepts exactly what keyNamePattern matches: every string
// up to four characters over an alphabet with each class of character
// (and some outside every class), and names around the length bound.
func TestKeyNameIsThePattern(t *testing.T) {
	re := regexp.MustCompile(keyNamePattern)
	alphabet := []string{"A", "Z", "a", "z", "0", "9", ".", "_", "-", "/", " ", "é", "\x00", "+"}
	var walk func(s string, depth int)
	n := 0
	walk = func(s string, depth int) {
		n++
		if got, want := validKeyName(s), re.MatchString(s); got != want {
			t.Fatalf("validKeyName(%q) = %v; the pattern says %v", s, got, want)
		}
		if depth == 4 {
			return
		}
		for _, c := range alphabet {
			walk(s+c, depth+1)
		}
	}
	walk("", 0)
	for _, s := range []string{strings.Repeat("a", 62), strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 62), "a" + strings.Repeat("-", 63), "k1\n"} {
		if got, want := validKeyName(s), re.MatchString(s); got != want {
			t.Fatalf("validKeyName(%q) = %v; the pattern says %v", s, got, want)
		}
	}
	if n < 40000 {
		t.Fatalf("only %d names tried", n)
	}
}
