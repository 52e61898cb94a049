// Package store is shoal's etcd state layer. It owns the key layout, the
// encoding of objects, and every transaction that changes state.
//
// # Key layout
//
// This is the one description of shoal's keyspace (keys.go builds every
// key; other packages' docs point here). All keys live under a prefix
// (default "/shoal", DefaultPrefix):
//
//	Objects
//	<prefix>/sandboxes/<ws>/<name>             shoal.v1.Sandbox
//	<prefix>/providers/<ws>/<name>             shoal.v1.Provider
//	<prefix>/attach/<ws>/<provider>/<sandbox>  live attachment, value = sandbox uid
//	<prefix>/release/<ws>/<provider>/<sandbox> attachment held by a DELETING sandbox, value = sandbox uid
//
//	Deletion (deletion.go)
//	<prefix>/deleting/<ws>/<name>              deletion intent of a sandbox, value = uid
//	<prefix>/torndown/<ws>/<name>              the owning node removed the container, value = uid
//
//	Nodes and placement (nodes.go, nodeloss.go; package registry holds the lease)
//	<prefix>/nodes/<id>                        shoal.v1.Node, on the node's own lease: Ready while it exists
//	<prefix>/nodeinfo/<id>                     shoal.v1.Node, no lease: the last registration, so a NotReady node is remembered
//	<prefix>/cordon/<id>                       "true" while the node is cordoned (survives restarts)
//	<prefix>/placed/<id>/<slot>                one per sandbox placed on the node, value = "<ws>/<name>/<uid>"
//	<prefix>/lost/<id>                         when the leader saw the node's lease gone (RFC 3339); fence time = this + margin
//	<prefix>/forget/<id>                       when `shoal node remove` asked for the node to be forgotten (RFC 3339)
//
//	Leadership (package lease)
//	<prefix>/leader//<lease id, hex>           election key of each candidate, value = node id, on its session's lease;
//	                                           the lowest create revision leads, and that revision is the fencing token
//	<prefix>/cluster/leader                    the leader's term: node, fence, since, synced (JSON), on its lease
//
//	Events (events.go; package events records them)
//	<prefix>/events/<ws>/<sandbox>/<id>        shoal.v1.Event, on a lease of the recording node: etcd deletes it
//	                                           when its time is up (--event-ttl, an hour); <id> begins with the
//	                                           event's time (16 hex digits of Unix ns), so a sandbox's events are
//	                                           one range, in time order; no other key's Txn reads or compares one
//
//	Cluster
//	<prefix>/cluster/id                        the cluster id (hex), made once; container labels carry it
//	<prefix>/cluster/page-token-secret         HMAC key of list page tokens (hex), made once
//	<prefix>/cluster/encryption                the key credentials are sealed with, keys retired (JSON, keystate.go)
//
// The election prefix is "<prefix>/leader/" (LeaderPrefix) and
// concurrency.Election adds a "/" of its own, hence the double slash. It
// must stay as it is: nodes that campaigned under two spellings of the
// prefix would each see themselves first and both lead.
//
// Object values are deterministic protobuf encodings with meta.resource_version
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
// of reading every slot key. A front end's list in another order and
// encoding (EachSandboxRecord, records.go) sorts on the copy's index and
// keeps, with each version of a record it sends, the encoding it made of
// it, which goes with that version.
//
// # Placement
//
// Which node a new sandbox goes to is package placement's policy, a pure
// function of the registry and the counts as read here; this package
// reads them and binds the choice in the create's Txn (nodes.go: place),
// comparing the node's registry key at the revision read, no cordon, and
// a free slot.
package store
