// Package chaos is shoal's chaos suite (docs/chaos.md): scenarios that drive
// concurrent clients and harassers against a node while faults are injected
// (process kill and stop, Docker API errors and latency through dockerproxy,
// etcd latency and outages through tcpproxy, containers killed behind
// shoal's back), a recorded history checked for linearizability with
// porcupine, and invariant checks over etcd snapshots and the node's log.
package chaos
