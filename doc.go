// Package shoal holds the domain vocabulary shared by every other package:
//
//   - the typed errors that the store, the coordinator and the API server
//     return, and the one function that maps them to gRPC status codes
//     (errors.go: GRPCStatus);
//   - the container runtime's types (container.go), which the agent and the
//     API server see a runtime through, so that a node can be given any
//     engine (Docker, or the simulated one of package hollow);
//   - the limits a client must know as well as the server: message sizes,
//     resource bounds, a node's SandboxLimits (limits.go).
//
// The packages, in the order a request meets them:
//
//	cli/          the `shoal` command tree: a client of the API (through
//	              apiclient/), and the `shoal node` and `shoal cluster`
//	              commands that start a node or restore its etcd
//	apiclient/    the API over a list of nodes, failing over where safe
//	apiserver/    the shoal.v1 gRPC service: validation, redaction, waits,
//	              relaying exec and logs to the owning node
//	store/        the etcd state layer: the key layout (store/doc.go), the
//	              one update loop, attachments, placement's compares, the
//	              deletion protocol's transactions, the watch cache
//	registry/     this node's registry key on its liveness lease
//	lease/        leader election on an etcd lease; the fencing token
//	coordinator/  leader-only loops: sandbox teardown, provider
//	              finalisation, lost nodes
//	agent/        node-local loops: provisioning, status sync, orphan
//	              reaping, self-fencing when cut off
//	events/       the bounded history of what happened to each sandbox,
//	              recorded by whichever part acted, never in its way
//	docker/       the Docker engine runtime (containers, exec, logs, events)
//	node/         wires all of the above into one server process
//
// README.md's Architecture table lists the rest (etcd embedding, PKI,
// encryption, audit, metrics, tracing, the lab).
package shoal
