package apiserver

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"shoal"
	"shoal/pki"
)

// Roles. With mutual TLS every call is authorized by the role its client
// certificate names (pki.RoleOf); without TLS a node serves loopback only
// (node.Config) and authorizes nothing. docs/security.md has this table.
//
// A method missing here is refused for every role but admin, so a new RPC
// is closed until it is given its roles (TestEveryMethodHasRoles).
var methodRoles = map[string][]pki.Role{
	// Reads: everyone.
	"/shoal.v1.Shoal/GetSandbox":     readers,
	"/shoal.v1.Shoal/ListSandboxes":  readers,
	"/shoal.v1.Shoal/WatchSandboxes": readers,
	"/shoal.v1.Shoal/GetProvider":    readers,
	"/shoal.v1.Shoal/ListProviders":  readers,
	"/shoal.v1.Shoal/ListEvents":     readers,
	"/shoal.v1.Shoal/WatchEvents":    readers,
	"/shoal.v1.Cluster/ListNodes":    readers,
	"/shoal.v1.Cluster/GetNode":      readers,
	"/shoal.v1.Cluster/Status":       readers,
	"/shoal.v1.Cluster/ListMembers":  readers,
	// Running sandboxes: operators. Exec and logs reach into containers
	// that hold credentials: not for viewers. Forwarded exec and logs
	// come from nodes.
	"/shoal.v1.Shoal/CreateSandbox":   operators,
	"/shoal.v1.Shoal/UpdateSandbox":   operators,
	"/shoal.v1.Shoal/DeleteSandbox":   operators,
	"/shoal.v1.Shoal/StopSandbox":     operators,
	"/shoal.v1.Shoal/StartSandbox":    operators,
	"/shoal.v1.Shoal/Exec":            operators,
	"/shoal.v1.Shoal/ExecInteractive": operators,
	"/shoal.v1.Shoal/Logs":            operators,
	// Copies are execs by other means: copying in can replace any file
	// the sandbox runs, copying out reads what exec reads.
	"/shoal.v1.Shoal/CopyToSandbox":   operators,
	"/shoal.v1.Shoal/CopyFromSandbox": operators,
	"/shoal.v1.Shoal/AttachProvider":  operators,
	"/shoal.v1.Shoal/DetachProvider":  operators,
	// Credentials and the cluster itself: admins (and nodes: a joining
	// node adds and promotes its own member).
	"/shoal.v1.Shoal/CreateProvider":        admins,
	"/shoal.v1.Shoal/UpdateProvider":        admins,
	"/shoal.v1.Shoal/DeleteProvider":        admins,
	"/shoal.v1.Cluster/CordonNode":          admins,
	"/shoal.v1.Cluster/RemoveNode":          admins,
	"/shoal.v1.Cluster/DrainNode":           admins,
	"/shoal.v1.Cluster/AddMember":           admins,
	"/shoal.v1.Cluster/RemoveMember":        admins,
	"/shoal.v1.Cluster/PromoteMember":       admins,
	"/shoal.v1.Cluster/Snapshot":            admins,
	"/shoal.v1.Cluster/RotateEncryptionKey": admins,
}

var (
	readers   = []pki.Role{pki.RoleAdmin, pki.RoleOperator, pki.RoleViewer, pki.RoleNode}
	operators = []pki.Role{pki.RoleAdmin, pki.RoleOperator, pki.RoleNode}
	admins    = []pki.Role{pki.RoleAdmin, pki.RoleNode}
)

// Identity is who made a call: the subject of its client certificate and
// the role it names. Without TLS it is empty.
type Identity struct {
	Subject string
	Role    pki.Role
}

// identity reads the verified client certificate of a call's connection.
func identity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, shoal.PermissionDenied("no peer information on the call")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, shoal.PermissionDenied("the call carries no verified client certificate")
	}
	leaf := ti.State.VerifiedChains[0][0]
	role, err := pki.RoleOf(leaf)
	if err != nil {
		return Identity{Subject: subject(leaf)}, shoal.PermissionDenied("%v", err)
	}
	return Identity{Subject: subject(leaf), Role: role}, nil
}

func subject(c *x509.Certificate) string { return c.Subject.String() }

// twin is the shoal.v1 method whose rules a method follows: its own name,
// or the twin Config.Twins gives it.
func (s *Server) twin(method string) string {
	if t, ok := s.cfg.Twins[method]; ok {
		return t
	}
	return method
}

// Caller is who makes the call ctx serves, for front ends served beside
// shoal.v1 (package openshellapi): with mutual TLS the subject and role of
// its verified client certificate and secure true; on a plaintext node
// (loopback only, where every call is allowed) the zero Identity and
// secure false.
func (s *Server) Caller(ctx context.Context) (id Identity, secure bool, err error) {
	if !s.cfg.Transport.Secure() {
		return Identity{}, false, nil
	}
	id, err = identity(ctx)
	return id, true, err
}

// AuthorizeAs refuses a call whose caller's role may not call method (a
// shoal.v1 method's full name) as well: for a call of another service
// that also does what method does (an OpenShell watch that follows logs
// is a Logs call too).
func (s *Server) AuthorizeAs(ctx context.Context, method string) error {
	return s.authorize(ctx, method)
}

// authorize refuses a call the caller's role may not make. Plaintext (no
// transport) authorizes everything: such a node serves loopback only.
func (s *Server) authorize(ctx context.Context, method string) error {
	if !s.cfg.Transport.Secure() {
		return nil
	}
	id, err := identity(ctx)
	if err != nil {
		return err
	}
	if allowed(id.Role, s.twin(method)) {
		return nil
	}
	return shoal.PermissionDenied("role %s (%s) may not call %s", id.Role, id.Subject, strings.TrimPrefix(method, "/"))
}

func allowed(role pki.Role, method string) bool {
	if role == pki.RoleAdmin {
		return true
	}
	for _, r := range methodRoles[method] {
		if r == role {
			return true
		}
	}
	return false
}
