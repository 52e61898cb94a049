package store

// The size budget. etcd refuses any request over its --max-request-bytes
// (1.5 MiB by default; the embedded member is started with exactly that,
// see embedetcd.MaxRequestBytes). The largest request the store ever builds
// is the update loop's Txn for an object (update.go): the new value twice
// (Then, and the nested Txn's Then) and the old value once (the nested
// Txn's Value compare), plus per-provider attachment compares and ops. So
// a stored object may take at most a third of the limit, less the
// attachment overhead; encode refuses anything larger, and the API's
// per-field limits (apiserver/validate.go) are chosen so that an object it
// accepts, with the largest labels and status it can later gain, always
// stays under MaxStoredBytes: whatever was accepted can be updated,
// labelled, deleted and, for a provider, rotated.
const (
	// MaxStoredBytes bounds one encoded object.
	MaxStoredBytes = 384 << 10
	// MaxTxnOverhead bounds what a Txn adds beyond its three copies of
	// the object: up to MaxProvidersPerSandbox attachment keys, each
	// moved (a delete and a put) in both branches, their compares, the
	// intent and fence compares.
	MaxTxnOverhead = 64 << 10
	// MinEtcdRequestBytes is the smallest etcd --max-request-bytes that
	// every transaction of the store fits: an external etcd must allow at
	// least this (its default, 1.5 MiB, does).
	MinEtcdRequestBytes = 3*MaxStoredBytes + MaxTxnOverhead
)

// The op budget. etcd refuses a Txn with more than --max-txn-ops (128 by
// default) compares or ops in a branch, and counts a nested Txn's ops
// against what its parent branch leaves. The widest Txn is the update
// loop's mark of a sandbox as DELETING: Then holds the put and, per
// provider, a delete of its attach/ key and a put of its release/ key (and
// the intent delete when the record is removed); the Else branch nests the
// same ops once more.
const (
	maxBranchOps = 2*MaxProvidersPerSandbox + 3 // + intent delete, node slot
	// MinEtcdTxnOps is the smallest etcd --max-txn-ops every transaction of
	// the store fits; etcd's default (128) does.
	MinEtcdTxnOps = 2 * maxBranchOps
)
