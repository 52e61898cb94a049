// Package apiserver implements the shoal.v1 gRPC service on top of the
// store and the node's container runtime.
//
// It validates every request before anything is written (validate.go),
// redacts credentials from every response, turns typed errors into gRPC
// status codes through shoal.GRPCStatus (one place), and implements the
// waits: CreateSandbox until READY, DeleteSandbox until the record is gone,
// DeleteProvider until the provider is gone. No handler retries a write
// itself: server-driven writes go through the store's update loop.
//
// Streams are bounded (streams.go): at most MaxWatches watches and
// MaxExecs exec, copy or logs --follow streams at once, beyond which a
// call gets RESOURCE_EXHAUSTED naming the flag; Shutdown ends every open stream and
// wait with UNAVAILABLE so that the node stops promptly. CreateSandbox
// also asks the node's engine (Engine) whether the image is there, before
// anything is stored, when this node is the one the sandbox will run on
// (sandboxes.go: admit); whether its resources fit is placement's check,
// against every node's registration (store/nodes.go).
//
// Any node serves any call: one that needs a sandbox's container (exec,
// logs, copies) is relayed to the owning node (forward.go). Copies
// (copy.go) follow docker cp's rules, decided on the owner (package
// tarcopy); their data passes a relaying node as it came, never decoded
// (relaycodec.go).
//
// ListEvents and WatchEvents (events.go) read the sandboxes' events
// (package events) through the store's event log; DeleteSandbox and the
// drains and removals of nodes record DeleteRequested, naming the caller.
//
// The Cluster service (cluster.go) also answers for the etcd members
// (cluster_members.go): their health as each member reports it, membership
// changes through the node's etcd client, retried while etcd refuses for a
// passing reason (a learner not caught up, a voter connected too recently),
// and snapshots of the node's own member.
package apiserver
