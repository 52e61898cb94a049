// Package nodecmd is the part of `shoal` that runs on a node's host and
// links the server: `shoal node start`, which runs a node (package node),
// and `shoal cluster snapshot restore`, which writes a data dir with
// etcd's own restore (package embedetcd).
//
// Package cli is the rest of the command tree, a client of the shoal.v1
// API alone. cmd/shoal-node, the server binary, adds these commands to it
// through cli.Extension; cmd/shoal, the CLI, adds cli.NodeCommands in
// their place, which run shoal-node with the same command line. So both
// binaries have one tree (one --help, the same exit codes) and shoal links
// none of the server's packages (deps_test.go holds that rule).
package nodecmd
