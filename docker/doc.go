// Package docker runs sandboxes as containers on the local Docker engine.
//
// Every container shoal creates carries the labels
//
//	shoal.dev/managed=true
//	shoal.dev/uid=<sandbox uid>
//	shoal.dev/name=<sandbox name>
//	shoal.dev/workspace=<workspace>
//	shoal.dev/node=<node id>
//
// and is named shoal-<workspace>-<name>-<uid prefix>. The uid label is the
// identity: removal is by uid, so it is idempotent and never hits a
// same-name replacement. Containers with these labels and no record are
// orphans (see package agent).
package docker
