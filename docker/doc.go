// Package docker runs sandboxes as containers on the local Docker engine.
//
// Every container shoal creates carries the labels
//
//	shoal.dev/managed=true
//	shoal.dev/uid=<sandbox uid>
//	shoal.dev/name=<sandbox name>
//	shoal.dev/workspace=<workspace>
//	shoal.dev/node=<node id>
//	shoal.dev/cluster=<cluster id>
//
// and is named shoal-<workspace>-<name>-<uid prefix>. The uid label is the
// identity: removal is by uid, so it is idempotent and never hits a
// same-name replacement. The cluster label (store.ClusterID, made once per
// etcd keyspace) scopes everything a Runtime lists, follows and removes to
// its own cluster, so two clusters whose nodes share an engine, even under
// one node id, never touch each other's containers. Containers with these
// labels and no record are orphans (see package agent).
//
// Exec runs the command under a tiny sh wrapper that reports the command's
// pid inside the container; when the caller goes away the runtime kills the
// command's process group with a second exec (Docker has no exec-kill).
// Every exec carries SHOAL_EXEC=<token> in its environment, a token made
// once per Runtime; ReapExecs, run by a restarted node's agent, kills the
// execs that still run under another token: an earlier run of the node
// died without ending them.
// Copies in and out (copy.go) use the engine's archive API, which works
// on a stopped container too; on a tmpfs mount (a read-only sandbox's
// /tmp), which that API cannot see, tar in the running container does the
// copy.
// Docker's error text reaches callers, scrubbed of the container's
// credentials.
package docker
