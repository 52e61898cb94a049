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
package store
