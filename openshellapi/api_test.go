package openshellapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// cluster is three in-process nodes on the hollow runtime (no engine
// needed: sandbox and provider calls are etcd's), node 0 embedding etcd
// and the others reaching it, each serving both APIs.
type cluster struct {
	nodes []*testenv.Node
	os    []openshellv1.OpenShellClient
	conns []*grpc.ClientConn
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n0 := testenv.StartNode(t, cfg)
	var more []node.Config
	for _, suffix := range []string{"-b", "-c"} {
		c := testenv.NodeConfig(t)
		c.ID += suffix
		c.Runtime = node.RuntimeHollow
		c.EtcdEndpoints = []string{n0.EtcdEndpoint()}
		more = append(more, c)
	}
	c := &cluster{nodes: append([]*testenv.Node{n0}, testenv.StartNodes(t, more...)...)}
	for _, n := range c.nodes {
		conn := dial(t, n)
		c.conns = append(c.conns, conn)
		c.os = append(c.os, openshellv1.NewOpenShellClient(conn))
	}
	return c
}

func dial(t *testing.T, n *testenv.Node) *grpc.ClientConn {
	t.Helper()
	tr, err := n.Config.TLS.Transport()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// other is the client of a node that does not own the sandbox (a
// non-owner relays what needs the owner; the rest is etcd's anyway).
func (c *cluster) other(t *testing.T, ctx context.Context, name string) openshellv1.OpenShellClient {
	t.Helper()
	sb, err := c.nodes[0].Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range c.nodes {
		if n.Config.ID != sb.Spec.Node {
			return c.os[i]
		}
	}
	t.Fatalf("every node owns %s", name)
	return nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, what string, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, s := range contains {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

func waitPhase(t *testing.T, ctx context.Context, c openshellv1.OpenShellClient, name string, want openshellv1.SandboxPhase) *openshellv1.Sandbox {
	t.Helper()
	var sb *openshellv1.Sandbox
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s %s", name, want), func() (bool, error) {
		r, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name})
		if err != nil {
			return false, err
		}
		sb = r.Sandbox
		return sb.Status.Phase == want, fmt.Errorf("phase %s", sb.Status.Phase)
	})
	return sb
}

// The gateway methods, the sandbox life cycle with its phases, and what
// is refused, through nodes that do not own the sandbox.
func TestSandboxes(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := ctxT(t, 3*time.Minute)
	os0 := c.os[0]

	h, err := c.os[1].Health(ctx, &openshellv1.HealthRequest{})
	if err != nil || h.Status != openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY {
		t.Fatalf("Health: %v %v", h, err)
	}
	gi, err := os0.GetGatewayInfo(ctx, &openshellv1.GetGatewayInfoRequest{})
	if err != nil || len(gi.ComputeDrivers) != 1 || gi.ComputeDrivers[0].Name != node.RuntimeHollow {
		t.Fatalf("GetGatewayInfo: %v %v", gi, err)
	}
	me, err := os0.GetCurrentUser(ctx, &openshellv1.GetCurrentUserRequest{})
	if err != nil || me.IdentityProvider != "local" || len(me.Roles) != 1 || me.Roles[0] != "admin" {
		t.Fatalf("GetCurrentUser on plaintext loopback: %v %v", me, err)
	}

	// Refused: no spec, and every field shoal has no equivalent for.
	_, err = os0.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "x"})
	wantCode(t, "no spec", err, codes.InvalidArgument, "spec")
	for field, spec := range map[string]*openshellv1.SandboxSpec{
		"spec.policy.filesystem":           {Policy: pb(nil).msg(polFilesystem, nil).policy()}, // more in policy_test.go
		"spec.log_level":                   {LogLevel: "debug"},
		"spec.tty":                         {Tty: true},
		"spec.resource_requirements.gpu":   {ResourceRequirements: &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{}}},
		"spec.template.runtime_class_name": {Template: &openshellv1.SandboxTemplate{RuntimeClassName: "kata"}},
		"spec.template.resources":          {Template: &openshellv1.SandboxTemplate{Resources: &structpb.Struct{}}},
		"spec.template.labels":             {Template: &openshellv1.SandboxTemplate{Labels: map[string]string{"a": "b"}}},
		"spec.template.driver_config":      {Template: &openshellv1.SandboxTemplate{DriverConfig: &structpb.Struct{}}},
		"spec.template.user_namespaces":    {Template: &openshellv1.SandboxTemplate{UserNamespaces: new(bool)}},
		"spec.environment[PATH]":           {Environment: map[string]string{"PATH": "/x"}},
	} {
		_, err := os0.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "refused", Spec: spec})
		wantCode(t, field, err, codes.InvalidArgument, field)
	}
	_, err = os0.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "Bad_Name", Spec: &openshellv1.SandboxSpec{}})
	wantCode(t, "bad name", err, codes.InvalidArgument, "name:")
	if _, err := c.nodes[0].Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "refused"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused create wrote something: %v", err)
	}

	// An empty name is generated, an empty workspace is default.
	r, err := os0.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{
		Environment: map[string]string{"A": "spec"},
		Template:    &openshellv1.SandboxTemplate{Environment: map[string]string{"A": "template", "B": "template"}},
	}, Labels: map[string]string{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := r.Sandbox
	name := sb.Metadata.Name
	if name == "" || sb.Metadata.Workspace != "default" || sb.Metadata.Id == "" || sb.Metadata.ResourceVersion == 0 || sb.Metadata.CreatedAtMs == 0 {
		t.Fatalf("created: %v", sb.Metadata)
	}
	if sb.Spec.Environment["A"] != "spec" || sb.Spec.Environment["B"] != "template" || sb.Spec.Template.Image == "" {
		t.Fatalf("spec: %v", sb.Spec)
	}
	if sb.Status.Phase != openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING {
		t.Fatalf("phase at create: %s", sb.Status.Phase)
	}
	far := c.other(t, ctx, name)
	ready := waitPhase(t, ctx, far, name, openshellv1.SandboxPhase_SANDBOX_PHASE_READY)
	shoalSb, err := c.nodes[0].Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if ready.Metadata.Id != shoalSb.Meta.Uid || ready.Metadata.ResourceVersion != uint64(shoalSb.Meta.ResourceVersion) || ready.Metadata.Labels["team"] != "x" {
		t.Fatalf("id/resource_version/labels: %v, shoal's %v", ready.Metadata, shoalSb.Meta)
	}
	if ready.Status.AgentPod == "" || ready.Status.SandboxName != name {
		t.Fatalf("status: %v", ready.Status)
	}

	// Stop and start.
	st, err := far.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	// The answer is the record the request wrote: the owner has not acted
	// on it yet, and the phase says where it is going.
	if p := st.Sandbox.Status.Phase; p != openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING {
		t.Fatalf("stop answered phase %s, want STOPPING", p)
	}
	stopped := waitPhase(t, ctx, far, name, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED)
	if stopped.Status.ExitCode != nil {
		t.Fatalf("a sandbox stopped on request has an exit code: %d", *stopped.Status.ExitCode)
	}
	started, err := far.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	// Not ERROR: a STOPPED sandbox asked to start did not exit by itself.
	if p := started.Sandbox.Status.Phase; p != openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING {
		t.Fatalf("start answered phase %s, want STARTING", p)
	}
	waitPhase(t, ctx, far, name, openshellv1.SandboxPhase_SANDBOX_PHASE_READY)

	// A command that exits by itself is ERROR with its exit code.
	if _, err := os0.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "exits", Spec: &openshellv1.SandboxSpec{Command: []string{"sh", "-c", "exit 3"}}}); err != nil {
		t.Fatal(err)
	}
	exited := waitPhase(t, ctx, c.other(t, ctx, "exits"), "exits", openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR)
	if exited.Status.ExitCode == nil || *exited.Status.ExitCode != 3 {
		t.Fatalf("exit code of a command that exited: %v", exited.Status)
	}
	if c := osCondition(exited, "Exited"); c == nil || c.LastTransitionTime == "" {
		t.Fatalf("condition Exited, with its time: %v", exited.Status.Conditions)
	}

	// Delete: deleted at once, the record goes when torn down; missing is
	// NOT_FOUND.
	del, err := far.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name})
	if err != nil || !del.Deleted {
		t.Fatalf("DeleteSandbox: %v %v", del, err)
	}
	if del, err := far.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name}); err == nil && !del.Deleted {
		t.Fatalf("DeleteSandbox again: %v", del)
	} else if err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("DeleteSandbox again: %v", err)
	}
	testenv.Eventually(t, 60*time.Second, "deleted sandbox gone", func() (bool, error) {
		r, err := far.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			return true, nil
		}
		if err == nil && r.Sandbox.Status.Phase != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
			return false, fmt.Errorf("phase %s while being deleted", r.Sandbox.Status.Phase)
		}
		return false, err
	})
	_, err = far.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name})
	wantCode(t, "delete a missing sandbox", err, codes.NotFound)
	_, err = far.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "nope", Workspace: "other"})
	wantCode(t, "get a missing sandbox", err, codes.NotFound)

	// A method shoal does not serve says so.
	err = c.conns[2].Invoke(ctx, "/openshell.v1.OpenShell/CreateSshSession", &emptypb.Empty{}, &emptypb.Empty{})
	wantCode(t, "CreateSshSession", err, codes.Unimplemented, "shoal does not serve openshell.v1.OpenShell/CreateSshSession")
}

func osCondition(sb *openshellv1.Sandbox, typ string) *openshellv1.SandboxCondition {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == typ {
			return c
		}
	}
	return nil
}
