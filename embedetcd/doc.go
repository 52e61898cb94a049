// Package embedetcd runs an etcd member inside the shoal process
// (go.etcd.io/etcd/server/v3/embed). It listens on loopback only unless
// configured otherwise.
//
// A member is alone by default; with an initial cluster (etcd's
// --initial-cluster, package etcdmember) it bootstraps with its peers, and with
// state "existing" it starts as a member added to a running cluster. A
// member whose data dir is initialised ignores both, as etcd does, and
// rejoins as itself. Server.Err reports a member removed from its cluster
// (ErrRemoved): its data dir cannot start again.
//
// Restore (restore.go) writes a data dir from a snapshot with etcd's own
// etcdutl.
package embedetcd
