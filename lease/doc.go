// Package lease runs leader election on an etcd lease
// (client/v3/concurrency) and hands the leader a fencing token.
//
// The lease is an optimisation: it tells a node when to stop. Safety comes
// from the token, the create revision of the leader's election key, which
// every leader-only write compares in its own Txn. A Leadership exposes the
// token as concurrency.Election does (Key, Rev); the writer builds the
// compare from it (the store takes it as a store.Fence), so this package
// knows nothing of the store. A node that was paused past its TTL may
// still believe it leads, but its writes fail.
//
// Current (term.go) tells anyone who leads, with the token and since when
// (each winner records its term, fenced, at Config.TermKey).
package lease
