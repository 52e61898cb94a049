package placement

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	shoalv1 "shoal/api/shoal/v1"
)

// Choose returns the node among nodes (non-empty: Filter's answer) with
// the least load, ties broken at random by r (nil: the package's source).
func Choose(nodes []*shoalv1.Node, load func(*shoalv1.Node) int, r *rand.Rand) *shoalv1.Node {
	var chosen *shoalv1.Node
	best := -1
	for _, i := range perm(r, len(nodes)) {
		if l := load(nodes[i]); best < 0 || l < best {
			best, chosen = l, nodes[i]
		}
	}
	return chosen
}

// Sandboxes is the load Choose reads from a node's status as read from
// the registry (its sandbox count).
func Sandboxes(n *shoalv1.Node) int { return int(n.GetStatus().GetSandboxes()) }

func perm(r *rand.Rand, n int) []int {
	if r == nil {
		return rand.Perm(n)
	}
	return r.Perm(n)
}

// Slot picks a free slot of a node with a capacity (max_sandboxes N > 0:
// slots "0".."N-1") at random by r (nil: the package's source), so that
// concurrent creates rarely want the same one; taken are the slots in use.
// A node with no free slot is a FAILED_PRECONDITION naming it.
func Slot(n *shoalv1.Node, taken map[string]bool, r *rand.Rand) (string, error) {
	var free []string
	for i := range int(n.MaxSandboxes) {
		if k := strconv.Itoa(i); !taken[k] {
			free = append(free, k)
		}
	}
	if len(free) == 0 {
		return "", noFit("", []Reason{{Node: n.Name, Why: Full, Msg: fmt.Sprintf("%s full (%d/%d)", n.Name, len(taken), n.MaxSandboxes)}})
	}
	if r == nil {
		return free[rand.IntN(len(free))], nil
	}
	return free[r.IntN(len(free))], nil
}

var _ error = (*NoFitError)(nil)
