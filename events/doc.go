// Package events records what happens to sandboxes, as a bounded history
// in etcd that `shoal sandbox events`, `shoal events` and `shoal sandbox
// describe` read: Kubernetes' events, for shoal's sandboxes.
//
// # Who records what
//
// The node that acts records, with its own id (shoal.v1.Event's
// reporting_node) and the part of it that acted (reporter):
//
//	api     Scheduled        the create placed the sandbox (node, and why that node)
//	        DeleteRequested  a delete, a drain or a node removal asked for its deletion (by whom)
//	        StopRequested    shoal sandbox stop asked for its container to stop (by whom, the grace); StartRequested, to start
//	agent   Created          the owner's engine made the container (its id, the image)
//	        Started          the container runs (its phase became READY)
//	        Stopped          its container stopped (exit_code; requested: whether a stop was asked for, or it ended by itself)
//	        Paused/Unpaused  docker pause and unpause, done outside shoal
//	        Frozen/Thawed    self-fencing: the node lost its lease and paused the container, and thawed it when it held one again
//	        NodeReady        the owner reports on a sandbox the leader had marked NodeLost
//	        TornDown         the owner removed the container of a deleted sandbox
//	        Failed           the engine refused or failed, in its own words (FailedTeardown: the removal did)
//	        EngineUnavailable/EngineAvailable  the node's engine stopped answering (past --engine-grace), and answers again
//	leader  NodeLost         the sandbox's node lost its lease; its phase is UNKNOWN
//	        Fenced           the lost node's fence time passed: it has frozen its containers by now, and deletions complete without it
//	        Removed          the record is gone (and which proof let it go: the owner's teardown, or the fence)
//
// There is no Pulled: a node never pulls an image (a missing one is
// refused at create, or is the agent's Failed, in the engine's words).
// A node never records about a sandbox it did not act on. (One freeze is
// not recorded: that of a node process restarted while cut off, which
// pauses its containers before it has an agent or a recorder,
// node/cutoff.go; it logs them.) Fenced is a fact
// every leader derives alike (the loss's time plus the fence margin), so
// it is written Once: its id comes from that time, its key is written only
// while absent, and a new leader that records it again changes nothing.
// NodeLost carries the loss's time and Fenced the fence time, so a
// sandbox's history sorts in the order things happened even where the
// writes came late.
//
// # Never in the way
//
// Record copies what it needs into an event and queues it: it never
// blocks and never fails, and whoever calls it goes on at once. Start, a
// runnable the node owns (and stops after the loops that record), drains
// the queue: it writes up to MaxBatch events in one etcd Txn, and keeps
// trying a write that failed for a reason that may pass (etcd unreachable:
// a node cut off from etcd records its Frozen events once it is back),
// while Record keeps queueing up to QueueSize. An event is dropped, and
// counted in shoal_events_dropped_total by reason, when the queue is full
// (queue_full), its sandbox is over its rate (rate_limited, below), etcd
// refused the write (refused: too large, out of space, not permitted), it
// outlived the TTL before it could be written (expired), or the node
// stopped before it was (shutdown; the last flush has FlushTimeout).
//
// # Bounded
//
// Every event key is on an etcd lease, so etcd deletes it when its time
// is up and nothing has to. A node grants one lease per time bucket
// (TTL/12, five minutes of the default hour) that expires a TTL after the
// bucket ends, and puts every event that happened in that bucket on it:
// an event lives between TTL and TTL plus a bucket (an hour to an hour and
// five minutes), and a node holds about thirteen leases at a time, however
// many events it writes. The TTL is the node's --event-ttl (DefaultTTL, an
// hour, as Kubernetes keeps its events).
//
// Per sandbox, repeats are coalesced much as Kubernetes does: an event
// with the same reason, message and details as the last one this node
// recorded about the sandbox, within CoalesceWindow (10 minutes), rewrites
// that one in place, with its count raised and its last time moved,
// instead of adding a key; repeats within one batch are one write. Unlike
// Kubernetes, only an unbroken run of repeats is coalesced: an event in
// between starts a new key, so that a sandbox's history keeps its order
// (Started, Stopped, Started reads as three events, not Stopped then
// Started x2); what a container that flaps adds is bounded by the rate
// below. New keys are rate limited per sandbox
// uid with a token bucket of Burst (25) that refills one every Refill (a
// twelfth of the TTL): a node adds at most 25 + 12 keys per sandbox per
// TTL, so a sandbox that flaps cannot grow etcd without bound. What this
// node tracks for that (the last event of each series, each sandbox's
// tokens) is swept as it ages, and bounded too.
//
// The keys, and the transactions that write and read them, are package
// store's (store/events.go; the layout is in store/doc.go).
package events
