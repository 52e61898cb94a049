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
