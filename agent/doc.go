// Package agent runs the node-local loops, on every node, leader or not:
//
//   - provisioning: a PROVISIONING sandbox assigned to this node gets its
//     container, with its providers' credentials as environment variables;
//     what Docker refuses is ERROR at once, in Docker's words;
//   - status sync: Docker's event stream plus a periodic resync update
//     sandbox status through the store's update loop from what the
//     container does: READY (running), PAUSED (docker pause), STOPPED with
//     the exit code, ERROR (out of memory, Docker could not start it, or
//     removed behind shoal's back; the sandbox stays deletable). A sandbox
//     with its own command is watched for a short startup window first, so
//     a command that ends at once is never reported READY;
//   - orphan reaping: a container labelled as this node's and this
//     cluster's, whose record is gone, is removed once it has been seen
//     orphaned for a grace period.
//   - exec reaping (execs.go): after a start, once the node holds its
//     lease, the execs an earlier run of the node left running in its
//     containers (it died mid-exec; nobody is attached any more) are
//     killed, and logged.
//
// Status messages are bounded (MaxMessageBytes). A sandbox watch or event
// stream that breaks is reopened after a doubling delay, never in a tight
// loop (a sandbox watch resumes after the last revision it delivered).
//
// Teardown of its own sandboxes is the agent's too: for a DELETING sandbox
// of this node it removes the container and records that it did, which the
// leader's fenced removal requires (store/deletion.go). The agent never
// changes a DELETING sandbox's phase and never removes the container of a
// live record.
//
// Self-fencing (freeze.go): while the node does not hold its liveness lease
// the agent pauses every container it runs; holding it again, it removes at
// once the containers of sandboxes deleted meanwhile and thaws the rest.
// Only the owning node's agent ever touches its containers.
//
// What the agent does and sees is recorded as the sandbox's events
// (events.go; package events): Created, Started, Stopped (with the exit
// code and whether the stop was asked for), Paused and Unpaused, Frozen
// and Thawed, NodeReady, TornDown, EngineUnavailable and EngineAvailable,
// and failures in the engine's words.
// Recording never holds up the agent.
package agent
