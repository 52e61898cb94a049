package store

import "strings"

// DefaultPrefix is the root of shoal's keyspace.
const DefaultPrefix = "/shoal"

type keys struct{ prefix string }

func (k keys) sandboxes(ws string) string      { return k.prefix + "/sandboxes/" + ws + "/" }
func (k keys) allSandboxes() string            { return k.prefix + "/sandboxes/" }
func (k keys) sandbox(ws, name string) string  { return k.sandboxes(ws) + name }
func (k keys) providers(ws string) string      { return k.prefix + "/providers/" + ws + "/" }
func (k keys) allProviders() string            { return k.prefix + "/providers/" }
func (k keys) provider(ws, name string) string { return k.providers(ws) + name }
func (k keys) attachments(ws, provider string) string {
	return k.prefix + "/attach/" + ws + "/" + provider + "/"
}
func (k keys) attachment(ws, provider, sandbox string) string {
	return k.attachments(ws, provider) + sandbox
}
func (k keys) releases(ws, provider string) string {
	return k.prefix + "/release/" + ws + "/" + provider + "/"
}
func (k keys) release(ws, provider, sandbox string) string {
	return k.releases(ws, provider) + sandbox
}

// intent is the pending-deletion key of a sandbox (see deletion.go).
func (k keys) intent(ws, name string) string { return k.prefix + "/deleting/" + ws + "/" + name }

// torndown is the owning node's record that it removed the container of a
// sandbox being deleted; its value is the sandbox's uid (see deletion.go).
func (k keys) torndown(ws, name string) string { return k.prefix + "/torndown/" + ws + "/" + name }

// clusterID holds the cluster's id; pageTokenSecret the key that signs page
// tokens. Both are made once per cluster (cluster.go).
func (k keys) clusterID() string       { return k.prefix + "/cluster/id" }
func (k keys) pageTokenSecret() string { return k.prefix + "/cluster/page-token-secret" }
func (k keys) encryption() string      { return k.prefix + "/cluster/encryption" }

// The node registry and placement (nodes.go).
func (k keys) node(id string) string         { return k.prefix + "/nodes/" + id }
func (k keys) nodeInfo(id string) string     { return k.prefix + "/nodeinfo/" + id }
func (k keys) cordon(id string) string       { return k.prefix + "/cordon/" + id }
func (k keys) placedPrefix(id string) string { return k.prefix + "/placed/" + id + "/" }
func (k keys) placed(id, slot string) string { return k.placedPrefix(id) + slot }
func (k keys) lost(id string) string         { return k.prefix + "/lost/" + id }
func (k keys) forget(id string) string       { return k.prefix + "/forget/" + id }

// Sandbox events (events.go): one key per event, under its sandbox's
// workspace and name, on a lease of the recording node.
func (k keys) allEvents() string                    { return k.prefix + "/events/" }
func (k keys) workspaceEvents(ws string) string     { return k.allEvents() + ws + "/" }
func (k keys) sandboxEvents(ws, name string) string { return k.workspaceEvents(ws) + name + "/" }
func (k keys) event(ws, name, id string) string     { return k.sandboxEvents(ws, name) + id }

// Leader is the election prefix used by package lease.
func (k keys) leader() string { return k.prefix + "/leader/" }

// leaderTerm is where each leader records its term (package lease).
func (k keys) leaderTerm() string { return k.prefix + "/cluster/leader" }

// lastSegment returns the name at the end of a key.
func lastSegment(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}
