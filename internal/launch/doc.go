// Package launch is the one node launcher of shoal's harnesses: the test
// clusters (internal/testenv), the chaos suite's single node and its
// hosts (chaos, chaos/hosts) and the fleet bench (scale) describe each
// node they run as a Node, whose Args are its `shoal node start` flags,
// written here once. Start runs a Node as a child process of the shoal
// binary (reaped by internal/proc, killed with its parent); the chaos
// hosts run the same Args as the command of a node's container.
package launch
