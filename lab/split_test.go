package lab_test

import (
	"regexp"
	"strings"
	"testing"

	"shoal/internal/testenv"
)

// labOnly matches the packages only shoal-lab may link: the chaos suite,
// the fleet bench, and what they bring (porcupine, gonum/plot).
var labOnly = regexp.MustCompile(`gonum|porcupine|^shoal/chaos(/|$)|^shoal/scale(/|$)`)

// The product binaries link none of the lab (issue 22): no package in
// the dependencies of cmd/shoal or cmd/shoal-node, directly or through
// another, is one of the lab's. shoal-lab does link them, which shows the pattern matches.
func TestShoalLinksNoLab(t *testing.T) {
	for _, pkg := range []string{"shoal/cmd/shoal", "shoal/cmd/shoal-node"} {
		var found []string
		for _, p := range testenv.Deps(t, pkg) {
			if labOnly.MatchString(p) {
				found = append(found, p)
			}
		}
		if len(found) > 0 {
			t.Errorf("%s links lab packages (they belong in shoal-lab): %s", pkg, strings.Join(found, " "))
		}
	}
	want := map[string]bool{"shoal/chaos": false, "shoal/scale": false, "github.com/anishathalye/porcupine": false, "gonum.org/v1/plot": false}
	for _, p := range testenv.Deps(t, "shoal/cmd/shoal-lab") {
		if _, ok := want[p]; ok {
			want[p] = true
		}
	}
	for p, ok := range want {
		if !ok {
			t.Errorf("cmd/shoal-lab does not link %s", p)
		}
	}
}
