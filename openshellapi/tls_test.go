package openshellapi_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/pki"
)

// With mutual TLS each OpenShell method is authorized as its shoal.v1
// twin: viewers read, operators run sandboxes, admins manage providers
// and list every workspace; a bearer token is refused whoever sends it.
func TestMutualTLSRoles(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir := t.TempDir()
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{cfg.ID}}); err != nil {
		t.Fatal(err)
	}
	files := func(name string) pki.Files {
		return pki.Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	cfg.TLS = files(cfg.ID)
	for _, u := range []*string{&cfg.EtcdListenClient, &cfg.EtcdListenPeer} {
		*u = "https://" + strings.TrimPrefix(*u, "http://")
	}
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	conns := map[string]*grpc.ClientConn{}
	as := func(role string) openshellv1.OpenShellClient {
		tr, err := files(role).Transport()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns[role] = conn
		return openshellv1.NewOpenShellClient(conn)
	}
	admin, operator, viewer := as("admin"), as("operator"), as("viewer")

	me, err := viewer.GetCurrentUser(ctx, &openshellv1.GetCurrentUserRequest{})
	if err != nil || me.IdentityProvider != "mtls" || len(me.Roles) != 1 || me.Roles[0] != "viewer" || !strings.Contains(me.Subject, "viewer") {
		t.Fatalf("GetCurrentUser as viewer: %v %v", me, err)
	}
	if _, err := viewer.Health(ctx, &openshellv1.HealthRequest{}); err != nil {
		t.Fatalf("Health as viewer: %v", err)
	}
	_, err = viewer.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "v", Spec: &openshellv1.SandboxSpec{}})
	wantCode(t, "CreateSandbox as viewer", err, codes.PermissionDenied, "CreateSandbox")
	if _, err := operator.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "o", Spec: &openshellv1.SandboxSpec{}}); err != nil {
		t.Fatalf("CreateSandbox as operator: %v", err)
	}
	if _, err := viewer.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "o"}); err != nil {
		t.Fatalf("GetSandbox as viewer: %v", err)
	}
	if _, err := viewer.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{}); err != nil {
		t.Fatalf("ListSandboxes as viewer: %v", err)
	}
	_, err = operator.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
	wantCode(t, "all_workspaces as operator", err, codes.PermissionDenied, "all_workspaces")
	if _, err := admin.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true}); err != nil {
		t.Fatalf("all_workspaces as admin: %v", err)
	}
	prov := &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "p"}, Type: "openai"}}
	_, err = operator.CreateProvider(ctx, prov)
	wantCode(t, "CreateProvider as operator", err, codes.PermissionDenied)
	if _, err := admin.CreateProvider(ctx, prov); err != nil {
		t.Fatalf("CreateProvider as admin: %v", err)
	}
	if _, err := viewer.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "p"}); err != nil {
		t.Fatalf("GetProvider as viewer: %v", err)
	}
	// A policy update is UpdateSandbox's: operators.
	policy := pb(nil).entry(polNetwork, "a", networkPolicy("a", pb(nil).str(epHost, "api.example.com").num(epPort, 443)))
	_, _, _, err = updateConfig(ctx, conns["viewer"], pb(nil).str(ucName, "o").msg(ucPolicy, policy))
	wantCode(t, "UpdateConfig as viewer", err, codes.PermissionDenied, "UpdateConfig")
	if _, _, _, err := updateConfig(ctx, conns["operator"], pb(nil).str(ucName, "o").msg(ucPolicy, policy)); err != nil {
		t.Fatalf("UpdateConfig as operator: %v", err)
	}
	_, err = viewer.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "o"})
	wantCode(t, "DeleteSandbox as viewer", err, codes.PermissionDenied)
	// A viewer may watch the record, not read the container's output.
	o, err := viewer.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "o"})
	if err != nil {
		t.Fatal(err)
	}
	watch := func(c openshellv1.OpenShellClient, logs bool) error {
		st, err := c.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: o.GetSandbox().GetMetadata().GetId(), FollowLogs: logs, StopOnTerminal: true})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	wantCode(t, "WatchSandbox follow_logs as viewer", watch(viewer, true), codes.PermissionDenied, "Logs")
	if err := watch(viewer, false); err != nil {
		t.Fatalf("WatchSandbox as viewer: %v", err)
	}
	_, err = viewer.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{SandboxId: o.GetSandbox().GetMetadata().GetId()})
	wantCode(t, "GetSandboxLogs as viewer", err, codes.PermissionDenied)

	bearer := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer abc")
	_, err = admin.GetSandbox(bearer, &openshellv1.GetSandboxRequest{Name: "o"})
	wantCode(t, "a bearer token", err, codes.Unauthenticated, "bearer")
	if _, err := operator.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "o"}); err != nil {
		t.Fatalf("DeleteSandbox as operator: %v", err)
	}
}

// --openshell-api=false serves shoal.v1 only.
func TestDisabled(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	cfg.OpenShellAPI = false
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)
	_, err := openshellv1.NewOpenShellClient(dial(t, n)).Health(ctx, &openshellv1.HealthRequest{})
	wantCode(t, "Health with --openshell-api=false", err, codes.Unimplemented)
}
