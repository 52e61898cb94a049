// Package placement is shoal's placement policy: which node a new sandbox
// may go to, and which of those it goes to. It is a pure function of the
// cluster's state as the caller read it: no etcd, no store. The store
// reads the registry and the counts, asks this package for a node, and
// binds the choice in the create's own Txn with the compares that make a
// stale read cost a retry (the node's registry key at the revision read,
// no cordon, a free slot): the bind is the store's, the choice is ours,
// as the Kubernetes scheduler chooses and its storage binds.
//
// # Filters
//
// Filter keeps the nodes a sandbox may be placed on. A request may pin a
// node (Request.Node: the only candidate) and select on labels
// (Request.Selector: a node's labels must include every term). A node is
// skipped, with the first reason that applies, in this order:
//
//   - its registry record is corrupt (it is not Ready while it is);
//   - it is not Ready (its lease ran out or it stopped);
//   - it is cordoned;
//   - its container engine is unavailable (the node publishes the
//     EngineUnavailable condition "True" once its engine has not
//     answered for longer than its --engine-grace);
//   - it is full: max_sandboxes > 0 and it holds that many;
//   - the sandbox asks for more CPU or memory than the node's engine
//     has, or than the node allows a sandbox (its --sandbox-max-*);
//   - it lacks a label the selector asks for (the first missing term, in
//     key order).
//
// When no node fits, the error is a FAILED_PRECONDITION (NoFitError) that
// names every node considered and why it was skipped, so the caller can
// act on it ("no node fits: a cordoned, b full (3/3)"). A pinned node
// that is not known, and a cluster where no node has registered, say so
// instead.
//
// # Scoring
//
// Among the nodes that fit, Choose takes the one with the fewest
// sandboxes; ties are broken at random, so concurrent creates from many
// API servers rarely want the same node (and the same slot, see Slot).
//
// # Counting
//
// A Tally counts sandboxes per node for scoring without reading a key per
// sandbox: the records its owner's copy of the sandboxes holds (the watch
// cache feeds it as records come and go), this server's creates that the
// copy has not seen yet, and its creates in flight from their choice to
// their Txn's answer (Tally.Pick counts the choice until it is released).
// Without those two, creates placed at once would all read the same
// lagging counts and choose the same node.
//
// Counts only steer the choice: capacity is enforced by the slots the
// store's create Txn takes (a node with max_sandboxes N has slots
// "0".."N-1", and Slot picks a free one at random), never by a count.
package placement
