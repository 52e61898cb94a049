// Package embedetcd runs an etcd server inside the shoal process
// (go.etcd.io/etcd/server/v3/embed) for single-host and development nodes.
// It listens on loopback only unless configured otherwise.
package embedetcd
