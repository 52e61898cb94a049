// Package hollow is a container runtime that simulates containers in
// memory, in the spirit of kubemark's hollow nodes: a node started with
// `shoal node start --runtime hollow` registers, places, provisions,
// pauses, reports status and tears down as any node does, but its
// "containers" are records in this process. It exists for scale tests
// (many nodes and sandboxes on one machine) and nothing else: a hollow
// container runs no process. What it simulates: create and start (with a
// configurable latency), a command that exits at once (true, false, or
// ending in `exit N`) versus one that runs until removed, a kill with an
// exit code (Kill), exec of true, false and env (the container's
// environment, credentials included, as a real one has it), pause and
// unpause, removal, the engine's event stream (sandbox cp is refused:
// a hollow container has no files), and egress sidecars as records
// (egress.go: with --hollow-egress the node's egress itself is real). Its containers live in
// the node process: a hollow node that restarts has none, and its agent
// reports each of its sandboxes' containers removed (ERROR), as it would of
// an engine that lost them.
package hollow
