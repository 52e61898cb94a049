// Package registry keeps this node in the cluster's node registry: its key
// <prefix>/nodes/<id> lives on the node's own etcd lease (TTL --node-ttl),
// so the node is Ready exactly while it holds that lease. The key layout is
// store's (store/doc.go), the registration Txn is in store/nodes.go; this
// package owns the lease.
package registry
