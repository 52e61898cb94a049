// Package agent runs the node-local loops, on every node, leader or not:
//
//   - provisioning: a PROVISIONING sandbox assigned to this node gets its
//     container, with its providers' credentials as environment variables;
//   - status sync: Docker's event stream plus a periodic resync update
//     sandbox status through the store's update loop (READY, STOPPED,
//     ERROR). A container removed behind shoal's back puts its sandbox in
//     ERROR with the reason; the sandbox stays deletable;
//   - orphan reaping: a container labelled as this node's with no record of
//     its uid is removed once it has been seen orphaned for a grace period.
//
// The agent never changes a DELETING sandbox's phase and never removes the
// container of a live record: teardown belongs to the coordinator.
package agent
