package apiserver

import (
	"testing"

	"google.golang.org/grpc"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/pki"
)

// Every RPC of both services has its roles, and no entry names an RPC that
// does not exist; the roles nest (a viewer's calls are an operator's, an
// operator's are an admin's).
func TestEveryMethodHasRoles(t *testing.T) {
	all := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{shoalv1.Shoal_ServiceDesc, shoalv1.Cluster_ServiceDesc} {
		for _, m := range sd.Methods {
			all["/"+sd.ServiceName+"/"+m.MethodName] = true
		}
		for _, m := range sd.Streams {
			all["/"+sd.ServiceName+"/"+m.StreamName] = true
		}
	}
	for m := range all {
		if len(methodRoles[m]) == 0 {
			t.Errorf("%s has no roles: give it some in methodRoles", m)
		}
	}
	for m := range methodRoles {
		if !all[m] {
			t.Errorf("methodRoles names %s, which neither service has", m)
		}
	}
	for m := range all {
		v, o, a := allowed(pki.RoleViewer, m), allowed(pki.RoleOperator, m), allowed(pki.RoleAdmin, m)
		if v && !o || o && !a || !a {
			t.Errorf("%s: viewer %v, operator %v, admin %v: roles must nest", m, v, o, a)
		}
		if !allowed(pki.RoleNode, m) {
			t.Errorf("%s: refused to nodes (forwarding and joins need every call)", m)
		}
	}
	// The contract, spot-checked.
	for _, tc := range []struct {
		role   pki.Role
		method string
		want   bool
	}{
		{pki.RoleViewer, "/shoal.v1.Shoal/ListSandboxes", true},
		{pki.RoleViewer, "/shoal.v1.Shoal/WatchSandboxes", true},
		{pki.RoleViewer, "/shoal.v1.Shoal/Exec", false},
		{pki.RoleViewer, "/shoal.v1.Shoal/CreateSandbox", false},
		{pki.RoleOperator, "/shoal.v1.Shoal/CreateSandbox", true},
		{pki.RoleOperator, "/shoal.v1.Shoal/Logs", true},
		{pki.RoleOperator, "/shoal.v1.Shoal/GetProvider", true},
		{pki.RoleOperator, "/shoal.v1.Shoal/CreateProvider", false},
		{pki.RoleOperator, "/shoal.v1.Shoal/DeleteProvider", false},
		{pki.RoleOperator, "/shoal.v1.Cluster/Snapshot", false},
		{pki.RoleAdmin, "/shoal.v1.Cluster/RemoveMember", true},
		{pki.Role("intruder"), "/shoal.v1.Shoal/GetSandbox", false},
	} {
		if got := allowed(tc.role, tc.method); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.role, tc.method, got, tc.want)
		}
	}
}
