// Package etcdmember is the syntax of an etcd cluster's membership as
// shoal's flags and API take it: member names (shoal's node ids), peer
// and client URLs, and etcd's --initial-cluster (name=URL,...).
//
// It is plain parsing, apart from the member it describes: the CLI checks
// a --peer-url with it before any call, the API server checks AddMember,
// and package embedetcd its configuration, each against the same rules,
// without the CLI linking the etcd server that embedetcd runs.
package etcdmember
