// Package node is the shoal server process. It wires the parts together
// and owns their lifetimes:
//
//	etcd (embedded, or external endpoints)
//	└─ store ─┬─ apiserver (gRPC on --listen) ─┐
//	          ├─ coordinator (leader-only) ────┼─ docker runtime
//	          └─ agent (node-local) ───────────┘
//
// The parts see the runtime through interfaces over shoal's own types
// (container.go at the root); this package checks that the Docker runtime
// satisfies each.
//
// The API's listener bounds the connections not yet past their handshake
// (package connlimit), within the process's open-file limit, which Run
// raises to its hard limit; /readyz fails while that listener stays
// saturated (conns.go).
//
// Run checks the Docker engine first, then starts etcd (an embedded member
// joins the cluster at --join first: membership.go), reads the cluster id
// (container labels carry it), and starts the rest in that order. It stops
// them in reverse: open streams end at once, the API stops taking requests
// (graceful, then forced), the loops return, the etcd client closes, and
// the embedded etcd stops last.
package node
