// Package store is shoal's etcd state layer. It owns the key layout, the
// encoding of objects, and every transaction that changes state.
//
// # Key layout
//
// All keys live under a prefix (default "/shoal"):
//
//	<prefix>/sandboxes/<workspace>/<name>               shoal.v1.Sandbox
//	<prefix>/providers/<workspace>/<name>               shoal.v1.Provider
//	<prefix>/attach/<workspace>/<provider>/<sandbox>    live attachment, value = sandbox uid
//	<prefix>/release/<workspace>/<provider>/<sandbox>   attachment held by a DELETING sandbox
//	<prefix>/deleting/<workspace>/<name>                deletion intent of a sandbox, value = uid
//	<prefix>/leader/                                    leader election (package lease)
//	<prefix>/cluster/id                                 the cluster id (hex), made once
//	<prefix>/cluster/page-token-secret                  HMAC key of page tokens (hex), made once
//	<prefix>/cluster/leader                             the leader's term: node, fence, since (JSON, package lease)
//	<prefix>/cluster/encryption                         the key credentials are sealed with, keys retired (JSON, keystate.go)
//
// Values are deterministic protobuf encodings with meta.resource_version
// cleared: the resource version of an object IS the ModRevision of its key,
// filled in on every read and never stored.
//
// # Writes
//
// Every mutation is one etcd Txn whose compares are stated next to it.
// Server-driven changes go through one read-modify-CAS loop, update (in
// update.go), modelled on Kubernetes' GuaranteedUpdate: the Txn's Else branch
// reads the fresh value, so a conflict costs no extra round trip, and the loop
// runs until it succeeds or the context ends. There is no retry count.
//
// # Attachments
//
// A sandbox's use of a provider is a key of its own, written and removed in
// the same Txn as the sandbox change that causes it, together with a compare
// on the provider key's ModRevision. Provider deletion compares that no key
// exists under the provider's attach/ prefix; a sandbox that becomes DELETING
// moves its keys from attach/ to release/ in the Txn that marks it. So a
// sandbox create or attach racing a provider delete has exactly one winner,
// and no live sandbox can reference a deleted provider.
//
// The deletion protocol is in deletion.go.
//
// # Watch cache
//
// A node's Store may keep a watch-fed copy of sandboxes and providers
// (UseCache; cache.go, cachewatch.go): one etcd watch per prefix, started
// from a list at a revision and resumed from the last revision applied,
// re-listed only after a compaction. Gets and lists are served from it
// without weakening consistency: each first reads etcd's current revision
// (a count-only range, linearizable) and waits until the copy has applied
// it, asking etcd for a progress notification when that revision was made
// outside the prefix; a copy that lags past a bound sends the read to etcd.
// Paged lists read a copy-on-write clone taken at their first page. The
// update loop starts from the copy (or from this node's own newer write),
// and only a Txn acts on that state: a refusal or a no-op is decided again
// from a read. Client watches are served from the copy's event log, so any
// number of them cost no etcd watch of their own. The copy feeds a
// placement.Tally, so placement counts a node's sandboxes from it instead
// of reading every slot key.
//
// # Placement
//
// Which node a new sandbox goes to is package placement's policy, a pure
// function of the registry and the counts as read here; this package
// reads them and binds the choice in the create's Txn (nodes.go: place),
// comparing the node's registry key at the revision read, no cordon, and
// a free slot.
package store
