package placement_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/placement"
)

func TestChooseFewestThenRandom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []int32 // sandboxes of nodes n0, n1, ...
		want   map[string]bool
	}{
		{name: "one", counts: []int32{7}, want: map[string]bool{"n0": true}},
		{name: "fewest", counts: []int32{3, 1, 2}, want: map[string]bool{"n1": true}},
		{name: "fewest last", counts: []int32{3, 2, 0}, want: map[string]bool{"n2": true}},
		{name: "tie", counts: []int32{1, 0, 0, 4, 0}, want: map[string]bool{"n1": true, "n2": true, "n4": true}},
		{name: "all tied", counts: []int32{2, 2}, want: map[string]bool{"n0": true, "n1": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*shoalv1.Node
			for i, c := range tc.counts {
				nodes = append(nodes, node("n"+string(rune('0'+i)), func(n *shoalv1.Node) { n.Status.Sandboxes = c }))
			}
			r := rand.New(rand.NewPCG(1, 2))
			seen := map[string]int{}
			for range 300 {
				n := placement.Choose(nodes, placement.Sandboxes, r)
				if !tc.want[n.Name] {
					t.Fatalf("chose %s (%d sandboxes), want one of %v", n.Name, n.Status.Sandboxes, tc.want)
				}
				seen[n.Name]++
			}
			// Ties are broken at random: each tied node is chosen.
			for name := range tc.want {
				if seen[name] == 0 {
					t.Errorf("%s never chosen in 300 tries among the tied %v: %v", name, tc.want, seen)
				}
			}
		})
	}
}

func TestTallyPickCountsInFlight(t *testing.T) {
	nodes := []*shoalv1.Node{node("a"), node("b"), node("c")}
	tl := placement.Tally{Rand: rand.New(rand.NewPCG(3, 4))}
	tl.Count("a", 2)
	tl.Count("b", 1)
	tl.CountUnseen("b", 1)
	// a: 2, b: 1+1 unseen, c: 0. A burst of picks counts each one in
	// flight: c twice, then the loads stay within one of each other.
	var picked []string
	for i := range 6 {
		picked = append(picked, tl.Pick(nodes).Name)
		if lo, hi := minMax(tl, nodes); i >= 1 && hi-lo > 1 {
			t.Fatalf("after %v the loads differ by %d", picked, hi-lo)
		}
	}
	if picked[0] != "c" || picked[1] != "c" {
		t.Errorf("picked %v, want c twice first (it held none)", picked)
	}
	for _, name := range picked {
		tl.Release(name)
	}
	if got := tl.Load("c"); got != 0 {
		t.Errorf("after every release c's load is %d, want 0", got)
	}
	if got := tl.Load("b"); got != 2 {
		t.Errorf("b's load %d, want 2 (1 record, 1 unseen)", got)
	}
	tl.ResetUnseen()
	tl.Count("a", -2)
	if got := tl.Counts(); len(got) != 1 || got["b"] != 1 {
		t.Errorf("counts %v, want b:1 only (a went to 0)", got)
	}
	tl.ResetCounts()
	if got := tl.Counts(); len(got) != 0 {
		t.Errorf("counts after reset %v", got)
	}
}

func minMax(tl placement.Tally, nodes []*shoalv1.Node) (lo, hi int) {
	lo = -1
	for _, n := range nodes {
		l := tl.Load(n.Name)
		if lo < 0 || l < lo {
			lo = l
		}
		hi = max(hi, l)
	}
	return lo, hi
}

func TestTallyReleaserOnce(t *testing.T) {
	var mu sync.Mutex
	var tl placement.Tally
	nodes := []*shoalv1.Node{node("a")}
	mu.Lock()
	tl.Pick(nodes)
	tl.Pick(nodes)
	mu.Unlock()
	release := tl.Releaser("a", &mu)
	release()
	release()
	mu.Lock()
	defer mu.Unlock()
	if got := tl.Load("a"); got != 1 {
		t.Fatalf("two picks and one release (called twice): load %d, want 1", got)
	}
}

func TestSlot(t *testing.T) {
	n := node("a", holding(0, 4))
	r := rand.New(rand.NewPCG(5, 6))
	seen := map[string]bool{}
	for range 200 {
		s, err := placement.Slot(n, map[string]bool{"1": true, "3": true}, r)
		if err != nil || (s != "0" && s != "2") {
			t.Fatalf("Slot = %q, %v; want 0 or 2", s, err)
		}
		seen[s] = true
	}
	if len(seen) != 2 {
		t.Errorf("free slots chosen %v, want both at random", seen)
	}
	_, err := placement.Slot(n, map[string]bool{"0": true, "1": true, "2": true, "3": true}, r)
	var nf *placement.NoFitError
	if !errors.As(err, &nf) || err.Error() != "no node fits: a full (4/4)" || nf.Reasons[0].Why != placement.Full {
		t.Fatalf("Slot of a full node: %v", err)
	}
}
