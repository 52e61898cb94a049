// Package scale is the fleet-scale benchmark behind `shoal-lab bench cluster`,
// in the spirit of kubemark: a real etcd (embedded in this process), real
// nodes as child processes of the shoal binary (the API and the leader),
// and many hollow nodes (`shoal node start --runtime hollow`, package
// hollow) as child processes too, each a node of its own with its own
// registry lease, agent, watch cache and simulated containers.
//
// It creates the sandboxes through the real nodes' API, placed on the
// hollow nodes by a node selector, and measures, at the record counts of
// the growth curve, the p99 of the creates just before each point, the
// p99 of a paged List of everything, and the API node's RSS. Then, with
// every sandbox READY, it SIGKILLs one hollow node and times until all its
// sandboxes are UNKNOWN, and SIGKILLs the leader and times until the new
// leader has recorded its term, until it has recorded (a fenced write) that
// its first resync is done, and until it has completed a fenced removal (a
// sandbox deleted at the kill). The report is JSON, a table, and a PNG plot of the
// growth curve (gonum/plot).
package scale
