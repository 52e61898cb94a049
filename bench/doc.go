// Package bench holds shoal's benchmarks (`make bench`). Each compares
// shoal against the raw work it wraps, on the same etcd or Docker engine in
// the same run, and reports the ratio as a custom metric. Figures are
// recorded in docs/benchmarks.md.
package bench
