// Package coordinator runs shoal's leader-only loops under the leader lease
// (package lease):
//
//   - sandbox teardown: for every DELETING sandbox, remove its container
//     (idempotent), then remove the record and its attachment keys in one
//     fenced Txn (store.RemoveSandbox);
//   - provider finalisation: delete terminating providers once no sandbox
//     holds them (store.FinalizeProvider).
//
// Work comes from a watch on sandboxes and providers plus a periodic
// resync, so teardown resumes after any restart or leadership change. Every
// write carries the leader's fencing token; when the lease is lost the
// loops return at once.
//
// The deletion protocol itself is written down in store/deletion.go.
package coordinator
