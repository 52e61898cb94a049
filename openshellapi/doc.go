// Package openshellapi serves OpenShell's gateway API (package openshell.v1,
// service OpenShell, as of OpenShell commit
// 2f7fb65591ee5746217ace154afc0aa6bf1afc6d) from a shoal node, beside
// shoal.v1 on the same listener, so that OpenShell's clients run unchanged
// against a shoal cluster.
//
// It is a translation layer and owns no state: every method maps onto the
// shoal.v1 method that does the same thing (its "twin") and is authorized as
// that twin. It adds no etcd round trip to what the shoal.v1 calls that
// give the same answer do (roundtrips_test.go counts them; only
// DetachSandboxProvider of a provider not attached and ListSandboxProviders
// read more than their one twin, a read each), and it forwards nothing
// itself: the twins already reach the owning node.
//
// The wire (names, numbers, types) is declared in api/openshell, shoal's own
// subset of OpenShell's proto; wirefacts_test.go pins it to the target
// commit. Two parts are not declared there and are read and written by
// field number instead: a sandbox's policy (policy.go, shoal's egress
// policy) and UpdateConfig's messages (config.go); TestPolicyWireFacts pins
// those numbers. A later OpenShell version that renames things gets a
// package of its own beside this one.
package openshellapi
