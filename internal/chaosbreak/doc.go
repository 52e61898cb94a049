// Package chaosbreak breaks shoal's guarantees on purpose, so that the
// chaos suite (docs/chaos.md) can show that each of its checkers fails
// when the guarantee it checks is gone. Only binaries built with
// `-tags chaosbreak` read SHOAL_CHAOS_BREAK (on.go); in every other build
// Mode is the empty constant (off.go) and every `if chaosbreak.Is(...)`
// compiles away.
//
// SHOAL_CHAOS_BREAK is a comma-separated list of these modes:
//
//	skip-compare         store: the update loop drops its ModRevision compare
//	                     (caught as a non-linearizable history, invariant 1)
//	check-then-act       store: provider delete checks for attachments, then
//	                     deletes without comparing them in its Txn (invariant 4)
//	ack-before-stop      agent: a stop is recorded as done (STOPPED, its
//	                     generation observed) without stopping the container,
//	                     and a sandbox stopped before its container was made
//	                     gets a running one recorded as stopped (invariant 15)
//	no-freeze            agent: a node that stops holding its lease does not
//	                     pause its containers (invariant 9)
//	unfenced-leader      store: leader-only writes lose their fence compare,
//	                     and a refused one is never taken for a lost fence
//	                     (invariant 7/10, when a deposed leader writes)
//	deaf-leader          lease: a leader does not notice that it lost its
//	                     lease; only a failed fenced write stops its term.
//	                     Safe on its own (the fence compare refuses the deposed
//	                     leader's writes); with unfenced-leader the deposed
//	                     leader's writes land, which is what makes
//	                     unfenced-leader observable in a short test
//	no-registry-compare  store: a create's placement drops the compare that
//	                     the chosen node's registry key exists (invariant 14,
//	                     when a node's lease expires between placement's read
//	                     and the create's commit)
//	no-capacity          store: a create's placement drops the compare that
//	                     its capacity slot is free (invariant 13, when
//	                     concurrent creates race for a node's last slots)
//	stale-cache          store: the watch cache applies each watch response
//	                     200 ms late and serves reads without waiting to
//	                     catch up with etcd's revision (invariant 1: a read
//	                     after a finished write returns older state)
//	stale-egress         agent: the egress proxy's policy of a sandbox is
//	                     the union of every rule it ever read for it, so a
//	                     removed rule still admits (invariant 16: a
//	                     connection begun after the write that removed it
//	                     is admitted)
package chaosbreak
