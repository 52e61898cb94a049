package placement

import (
	"maps"
	"math/rand/v2"
	"sync"

	shoalv1 "shoal/api/shoal/v1"
)

// Tally counts sandboxes per node for Choose: the records its owner's copy
// holds (Count), this server's creates the copy has not seen yet
// (CountUnseen), and its creates in flight (Pick, until released).
//
// A Tally does no locking of its own: its owner serialises every call,
// including a Pick's release, so that a choice and the counts it reads are
// one step with the copy's changes (the watch cache calls it under its
// lock). The zero value is ready to use.
type Tally struct {
	stored, unseen, pending map[string]int
	// Rand breaks ties; nil uses the package's source.
	Rand *rand.Rand
}

func add(m *map[string]int, node string, d int) {
	if *m == nil {
		*m = map[string]int{}
	}
	if (*m)[node] += d; (*m)[node] <= 0 {
		delete(*m, node)
	}
}

// Count adds d to the records the copy holds on node.
func (t *Tally) Count(node string, d int) { add(&t.stored, node, d) }

// CountUnseen adds d to this server's creates on node that the copy does
// not hold yet.
func (t *Tally) CountUnseen(node string, d int) { add(&t.unseen, node, d) }

// ResetCounts forgets the copy's records (before a relist counts them again).
func (t *Tally) ResetCounts() { clear(t.stored) }

// ResetUnseen forgets the unseen creates (the owner forgot its writes).
func (t *Tally) ResetUnseen() { clear(t.unseen) }

// Counts are the records the copy holds per node (a copy).
func (t *Tally) Counts() map[string]int {
	if t.stored == nil {
		return map[string]int{}
	}
	return maps.Clone(t.stored)
}

// Unseen are the unseen creates per node (a copy).
func (t *Tally) Unseen() map[string]int {
	if t.unseen == nil {
		return map[string]int{}
	}
	return maps.Clone(t.unseen)
}

// Load is what Choose weighs a node by: its records, unseen creates and
// creates in flight.
func (t *Tally) Load(node string) int { return t.stored[node] + t.unseen[node] + t.pending[node] }

// Pick chooses among nodes (non-empty) by Load and counts the choice as a
// create in flight on it until Release(chosen.Name).
func (t *Tally) Pick(nodes []*shoalv1.Node) *shoalv1.Node {
	n := Choose(nodes, func(n *shoalv1.Node) int { return t.Load(n.Name) }, t.Rand)
	add(&t.pending, n.Name, 1)
	return n
}

// Release ends a create in flight on node that Pick counted.
func (t *Tally) Release(node string) { add(&t.pending, node, -1) }

// Releaser makes Release of node callable once through lock (the owner's,
// which a Tally's calls are made under); more calls do nothing.
func (t *Tally) Releaser(node string, lock sync.Locker) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			lock.Lock()
			defer lock.Unlock()
			t.Release(node)
		})
	}
}
