// Package shoal holds the domain vocabulary shared by every other package:
// the typed errors that the store, the coordinator and the API server return,
// and the one function that maps them to gRPC status codes.
//
// The packages, in the order a request meets them:
//
//	cli/          the `shoal` command tree, a thin gRPC client
//	apiserver/    the shoal.v1 gRPC service: validation, redaction, waits
//	store/        the etcd state layer: key layout, the one update loop,
//	              attachments, the deletion protocol's transactions
//	lease/        leader election on an etcd lease; the fencing token
//	coordinator/  leader-only loops: sandbox teardown, provider finalisation
//	agent/        node-local loops: provisioning, Docker status sync, orphan reaping
//	docker/       the Docker engine runtime (containers, exec, logs, events)
//	node/         wires all of the above into one server process
package shoal
