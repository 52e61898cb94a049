// Package bench holds shoal's benchmarks (`make bench`). Most compare
// shoal against the raw work it wraps, on the same etcd or Docker engine in
// the same run, and report the ratio as a custom metric; the cluster ones
// (cluster_test.go) measure failover and forwarding on real node processes
// and report their figures the same way. Figures are recorded in
// docs/benchmarks.md.
package bench
