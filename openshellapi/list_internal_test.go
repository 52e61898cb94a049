package openshellapi

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// least keeps the k least of what it is given, whatever the order and the
// ties: for every k, the sorted list's first k.
func TestLeast(t *testing.T) {
	t.Parallel()
	type item struct{ key, id int }
	byKey := func(a, b item) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.id, b.id)) }
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 10, 100, 257} {
		for _, spread := range []int{1, 3, 1000} { // 1: every key tied
			for _, k := range []int{0, 1, 2, n / 3, n - 1, n, n + 5} {
				if k < 0 {
					continue
				}
				items := make([]item, n)
				for i := range items {
					items[i] = item{r.IntN(spread), i}
				}
				want := slices.Clone(items)
				slices.SortFunc(want, byKey)
				want = want[:min(k, n)]
				l := least[item]{k: k, c: byKey}
				for _, it := range items {
					l.add(it)
				}
				if got := l.sorted(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Fatalf("n %d, spread %d, k %d: %v, want %v", n, spread, k, got, want)
				}
			}
		}
	}
}
