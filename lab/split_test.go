package lab_test

import (
	"regexp"
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
	testenv.LinksNone(t, labOnly, "lab packages belong in shoal-lab", "shoal/cmd/shoal", "shoal/cmd/shoal-node")
	testenv.LinksAll(t, "shoal/cmd/shoal-lab", "shoal/chaos", "shoal/scale", "github.com/anishathalye/porcupine", "gonum.org/v1/plot")
}
