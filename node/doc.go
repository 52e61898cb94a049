// Package node is the shoal server process. It wires the parts together
// and owns their lifetimes:
//
//	etcd (embedded member, or --etcd-endpoints)
//	└─ store (+ watch cache, --watch-cache)
//	   ├─ registry ──── this node's registry key, on its liveness lease
//	   ├─ lease ─────── leader election; the term's fencing token
//	   │  └─ coordinator (leader only: teardown, provider finalisation, lost nodes)
//	   ├─ apiserver ─── gRPC on --listen (shoal.v1.Shoal, shoal.v1.Cluster) ─┐
//	   └─ agent ─────── node-local loops: provisioning, status, reaping ─────┴─ engine
//
// The engine is the Docker runtime (package docker), or with --runtime
// hollow the simulated one (package hollow). Only the agent and the API
// server see it (the agent runs containers; the API server execs, reads
// logs and checks an image), each through its own interface over shoal's
// types (container.go at the root); this package checks that both
// runtimes satisfy them. The coordinator writes only to etcd, each write
// fenced by its term's token; the owning node's agent removes containers.
//
// The API's listener bounds the connections not yet past their handshake
// (package connlimit), within the process's open-file limit, which Run
// raises to its hard limit; /readyz (on --metrics-listen) fails while that
// listener stays saturated (conns.go).
//
// Run is three steps (node.go). assemble builds every part from the
// config: it checks the Docker engine first (not with --runtime hollow),
// then starts etcd (an embedded member joins the cluster at --join first:
// membership.go), reads the cluster id (container labels carry it) and
// admits the encryption key ring, and builds the rest, opening every
// listener; nothing serves yet. serve registers the node, then starts the
// metrics and debug servers, the watch cache, the registry, the
// coordinator and the agent under one errgroup, and serves the API last;
// every goroutine it starts is stop's to wait for. stop runs once ctx ends
// or a part fails, in reverse: the loops are cancelled, open streams end
// at once, the API stops taking requests (graceful, then forced after
// ShutdownTimeout), the loops are waited for, the HTTP servers close, then
// the runtime and the etcd client, and the embedded etcd stops last.
package node
