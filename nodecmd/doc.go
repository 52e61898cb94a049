// Package nodecmd is the part of `shoal` that runs on a node's host and
// links the server: `shoal node start`, which runs a node (package node),
// and `shoal cluster snapshot restore`, which writes a data dir with
// etcd's own restore (package embedetcd).
//
// Package cli is the rest of the command tree, a client of the shoal.v1
// API alone; cmd/shoal adds these commands to it through cli.Extension,
// so that `shoal` keeps one tree (one --help, one completion, the same
// exit codes) while cli links none of the server's packages
// (deps_test.go holds that rule).
package nodecmd
