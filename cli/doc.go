// Package cli is the `shoal` command tree (urfave/cli/v2), a thin client
// of the shoal.v1 API. The commands that run on a node's host and link the
// server, `shoal node start` and `shoal cluster snapshot restore`, are
// package nodecmd, which the server binary shoal-node adds to this tree
// (Extension, tool.go); in `shoal` they run shoal-node (NodeCommands,
// nodebinary.go). This package links none of the server's packages.
//
// Flags may stand before or after positional arguments, as in kubectl:
// Main reorders the arguments once, for the whole tree, before urfave/cli
// parses them (args.go). Output formatting lives in one place (output.go),
// and so does the mapping from gRPC codes to exit codes and hints
// (errors.go).
//
// The lab's commands (chaos, soak, fleet bench) are not in `shoal`: they
// are shoal-lab (package lab), which runs on these same conventions
// through RunTool (tool.go), so that the product binary links none of the
// lab's packages. `shoal chaos` and `shoal bench` say where they went.
package cli
