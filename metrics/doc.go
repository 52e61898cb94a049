// Package metrics is a node's Prometheus metrics and its health endpoints:
// one registry per node, served with /healthz and /readyz on
// --metrics-listen. Parts of the node record into it through the nil-safe
// methods of *Metrics (a nil *Metrics records nothing), and values that
// are states rather than events (sandboxes by phase, leadership, cache lag)
// are read at scrape time from the functions the node registers.
// docs/observability.md lists every metric.
package metrics
