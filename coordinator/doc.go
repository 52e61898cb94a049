// Package coordinator runs shoal's leader-only loops under the leader lease
// (package lease). It never talks to a Docker engine: containers are their
// owning node's (package agent).
//
//   - sandbox removal: for every DELETING sandbox whose owner has recorded
//     that it removed the container, or whose owner is lost and past its
//     fence time, remove the record and its keys in one fenced Txn
//     (store.RemoveSandbox);
//   - provider finalisation: delete terminating providers once no sandbox
//     holds them (store.FinalizeProvider);
//   - node loss: when a node's registry key is gone, record the loss and
//     give its sandboxes phase UNKNOWN (store.MarkNodeLost,
//     store.MarkSandboxesUnknown); forget a node `shoal node remove` named
//     once no sandbox names it (store.CompleteForget);
//   - repairs: stale deletion intents and keys no sandbox holds.
//
// The leader records what it did as events (package events): NodeLost
// and Removed with the writes that did it (the store records them), and
// Fenced for every sandbox of a lost node once its fence time has passed
// (fenced.go says what fenced means here).
//
// Work comes from watches on sandboxes, providers, node registry keys and
// teardown records, plus a periodic resync, so it resumes after any restart
// or leadership change. Every write carries the leader's fencing token;
// when the lease is lost the loops return at once.
//
// The deletion protocol itself is written down in store/deletion.go.
package coordinator
