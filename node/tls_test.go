package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/audit"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/pki"
)

// certs writes a CA and certificates for the node ids into a temp dir.
func certs(t *testing.T, nodes ...string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// secure gives cfg the certificate f and makes its etcd URLs https.
func secure(cfg *node.Config, f pki.Files) {
	cfg.TLS = f
	for _, u := range []*string{&cfg.EtcdListenClient, &cfg.EtcdListenPeer} {
		*u = "https://" + strings.TrimPrefix(*u, "http://")
	}
}

func files(dir, name string) pki.Files {
	return pki.Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
}

// A node started with --tls-*: its API and its embedded etcd's client URL
// serve mutual TLS. A client with a certificate of the cluster's CA is
// served; a plaintext client and one whose certificate another CA signed
// are refused, by the API and by etcd alike. (Hollow runtime: no engine
// needed.)
func TestNodeServesMutualTLSOnly(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir, other := certs(t, cfg.ID), certs(t, cfg.ID)
	secure(&cfg, files(dir, cfg.ID))
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	// The node's own certificate (testenv dials with it), and a viewer's.
	if _, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{}); err != nil {
		t.Fatalf("with the node certificate: %v", err)
	}
	dialAPI := func(creds grpc.DialOption) error {
		conn, err := grpc.NewClient(n.Addr(), creds)
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = shoalv1.NewShoalClient(conn).ListSandboxes(cctx, &shoalv1.ListSandboxesRequest{})
		return err
	}
	viewer, err := files(dir, "viewer").Transport()
	if err != nil {
		t.Fatal(err)
	}
	if err := dialAPI(grpc.WithTransportCredentials(viewer.DialCreds())); err != nil {
		t.Fatalf("with a viewer certificate: %v", err)
	}
	if err := dialAPI(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Fatal("a plaintext client was served")
	}
	stranger, err := files(other, "admin").Transport()
	if err != nil {
		t.Fatal(err)
	}
	if err := dialAPI(grpc.WithTransportCredentials(stranger.DialCreds())); err == nil {
		t.Fatal("a client of another CA was served")
	}

	dialEtcd := func(tr *pki.Transport) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}, TLS: tr.ClientTLS(), DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = c.Get(cctx, "/shoal/cluster/id")
		return err
	}
	own, err := files(dir, cfg.ID).Transport()
	if err != nil {
		t.Fatal(err)
	}
	if err := dialEtcd(own); err != nil {
		t.Fatalf("etcd with the node's certificate: %v", err)
	}
	// A client certificate of the same CA is served by the API under its
	// role, never by etcd: there it would read and write past the roles.
	for _, role := range []string{"viewer", "operator", "admin"} {
		tr, err := files(dir, role).Transport()
		if err != nil {
			t.Fatal(err)
		}
		if err := dialEtcd(tr); err == nil {
			t.Fatalf("etcd served a %s certificate", role)
		}
	}
	if err := dialEtcd(stranger); err == nil {
		t.Fatal("etcd served a client of another CA")
	}
	plain, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + n.EtcdEndpoint()}, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = plain.Get(cctx, "/shoal/cluster/id")
		cancel()
		plain.Close()
	}
	if err == nil {
		t.Fatal("etcd served a plaintext client")
	}
}

// A node's own certificate must be a node certificate valid for
// pki.NodeName: with any other, start fails naming --tls-cert.
func TestNodeRefusesAClientCertificate(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	dir := certs(t, cfg.ID)
	secure(&cfg, files(dir, "admin"))
	if _, err := node.New(cfg); err == nil || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "node certificate") {
		t.Fatalf("a node with the admin certificate: %v", err)
	}
}

// Without TLS a node refuses to listen or advertise beyond loopback,
// unless told --insecure; TLS flags must come as a set.
func TestNodeRefusesPlaintextBeyondLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		change func(*node.Config)
		want   string
	}{
		{func(c *node.Config) { c.Listen = "0.0.0.0:7443" }, "--listen"},
		{func(c *node.Config) { c.Listen = ":7443" }, "--listen"},
		{func(c *node.Config) { c.Advertise = "10.0.0.5:7443" }, "--advertise"},
		{func(c *node.Config) { c.EtcdListenPeer = "http://10.0.0.5:2380" }, "--etcd-listen-peer"},
		{func(c *node.Config) { c.EtcdAdvertiseClient = "http://10.0.0.5:2379" }, "--etcd-advertise-client"},
		{func(c *node.Config) { c.TLS = pki.Files{Cert: "x.crt"} }, "--tls-key"},
		{func(c *node.Config) { c.DebugListen = "0.0.0.0:6060" }, "--debug-listen"},
	} {
		cfg := testenv.NodeConfig(t)
		tc.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
		if tc.want == "--tls-key" {
			continue
		}
		cfg.Insecure = true
		if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s with --insecure: %v", tc.want, err)
		}
	}
}

// Each role's certificate may make its calls and no others: a refusal is
// PERMISSION_DENIED naming the role and the method, and writes nothing.
func TestRolesOverMutualTLS(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir := certs(t, cfg.ID)
	secure(&cfg, files(dir, cfg.ID))
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	as := func(role string) (shoalv1.ShoalClient, shoalv1.ClusterClient) {
		tr, err := files(dir, role).Transport()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return shoalv1.NewShoalClient(conn), shoalv1.NewClusterClient(conn)
	}
	admin, adminCluster := as("admin")
	operator, operatorCluster := as("operator")
	viewer, _ := as("viewer")
	denied := func(err error, role, method string) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role "+role) || !strings.Contains(err.Error(), method) {
			t.Fatalf("%s calling %s: %v, want PERMISSION_DENIED naming both", role, method, err)
		}
	}
	provider := &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"}, Type: shoalv1.ProviderType_NVIDIA, Credentials: map[string]string{"NVIDIA_API_KEY": "nvapi-roles-test"}}
	_, err := operator.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: provider})
	denied(err, "operator", "shoal.v1.Shoal/CreateProvider")
	if _, err := admin.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: provider}); err != nil {
		t.Fatalf("admin creates a provider: %v", err)
	}
	sb := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "s"}, Spec: &shoalv1.SandboxSpec{Providers: []string{"p"}}}
	_, err = viewer.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: sb})
	denied(err, "viewer", "shoal.v1.Shoal/CreateSandbox")
	// An operator posing as a forwarding node is not taken at its word.
	forged := metadata.AppendToOutgoingContext(ctx, "shoal-forwarded-by", "n-forged")
	if _, err := operator.CreateSandbox(forged, &shoalv1.CreateSandboxRequest{Sandbox: sb}); err != nil {
		t.Fatalf("operator creates a sandbox: %v", err)
	}
	if _, err := operator.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"}); err != nil {
		t.Fatalf("operator reads a provider: %v", err)
	}
	list, err := viewer.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("viewer lists: %v (%d)", err, len(list.GetItems()))
	}
	_, err = viewer.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "s"})
	denied(err, "viewer", "shoal.v1.Shoal/DeleteSandbox")
	// A stream is authorized as well.
	ex, err := viewer.Exec(ctx, &shoalv1.ExecRequest{Name: "s", Command: []string{"true"}})
	if err == nil {
		_, err = ex.Recv()
	}
	denied(err, "viewer", "shoal.v1.Shoal/Exec")
	// Copies are execs by other means: not for viewers, either way.
	cf, err := viewer.CopyFromSandbox(ctx, &shoalv1.CopyFromSandboxRequest{Name: "s", Path: "/etc"})
	if err == nil {
		_, err = cf.Recv()
	}
	denied(err, "viewer", "shoal.v1.Shoal/CopyFromSandbox")
	ct, err := viewer.CopyToSandbox(ctx)
	if err == nil {
		_ = ct.Send(&shoalv1.CopyToSandboxInput{Input: &shoalv1.CopyToSandboxInput_Start{Start: &shoalv1.CopyToSandboxStart{Name: "s", Path: "/tmp"}}})
		_, err = ct.CloseAndRecv()
	}
	denied(err, "viewer", "shoal.v1.Shoal/CopyToSandbox")
	// An operator may (a hollow container has no files to copy), once
	// the sandbox has its container.
	testenv.Eventually(t, 30*time.Second, "the sandbox has a container", func() (bool, error) {
		sb, err := operator.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s"})
		return err == nil && sb.GetStatus().GetContainerId() != "", err
	})
	cf, err = operator.CopyFromSandbox(ctx, &shoalv1.CopyFromSandboxRequest{Name: "s", Path: "/etc"})
	if err == nil {
		_, err = cf.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "hollow") {
		t.Fatalf("operator copies out of a hollow sandbox: %v", err)
	}
	_, err = operatorCluster.CordonNode(ctx, &shoalv1.CordonNodeRequest{Name: cfg.ID, Cordon: true})
	denied(err, "operator", "shoal.v1.Cluster/CordonNode")
	if _, err := adminCluster.CordonNode(ctx, &shoalv1.CordonNodeRequest{Name: cfg.ID, Cordon: true}); err != nil {
		t.Fatalf("admin cordons: %v", err)
	}
	// A node's certificate is: its forwarded-by is recorded.
	_, nodeCluster := as(cfg.ID)
	if _, err := nodeCluster.CordonNode(metadata.AppendToOutgoingContext(ctx, "shoal-forwarded-by", "n-peer"),
		&shoalv1.CordonNodeRequest{Name: cfg.ID, Cordon: false}); err != nil {
		t.Fatalf("a node uncordons: %v", err)
	}
	// Nothing a refusal touched was written: the sandbox is there, not
	// being deleted.
	got, err := admin.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s"})
	if err != nil || got.Meta.DeletionTimestamp != nil {
		t.Fatalf("after refused delete: %v %v", got, err)
	}

	// The audit log: every mutating call and exec, refused ones too, with
	// the caller's identity and role; no read; no credential.
	n.Stop() // flushes and closes it
	data, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "nvapi-roles-test") {
		t.Fatal("the audit log holds a credential")
	}
	if st, err := os.Stat(cfg.AuditLog); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit log mode: %v %v", st.Mode(), err)
	}
	var got2 []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if r.RequestID == "" || r.Node != cfg.ID || !strings.Contains(r.Identity, "O="+r.Role) {
			t.Errorf("audit record without request id, node or identity: %+v", r)
		}
		got2 = append(got2, fmt.Sprintf("%s %s %s %s%s", r.Role, strings.TrimPrefix(r.Method, "/shoal.v1."), r.Object, r.Code, r.ForwardedBy))
	}
	want := []string{
		"operator Shoal/CreateProvider default/p PermissionDenied",
		"admin Shoal/CreateProvider default/p OK",
		"viewer Shoal/CreateSandbox default/s PermissionDenied",
		"operator Shoal/CreateSandbox default/s OK",
		"viewer Shoal/DeleteSandbox default/s PermissionDenied",
		"viewer Shoal/Exec  PermissionDenied",
		"viewer Shoal/CopyFromSandbox  PermissionDenied",
		"viewer Shoal/CopyToSandbox  PermissionDenied",
		"operator Shoal/CopyFromSandbox default/s FailedPrecondition",
		"operator Cluster/CordonNode " + cfg.ID + " PermissionDenied",
		"admin Cluster/CordonNode " + cfg.ID + " OK",
		"node Cluster/CordonNode " + cfg.ID + " OKn-peer",
	}
	if strings.Join(got2, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit log:\n%s\nwant:\n%s", strings.Join(got2, "\n"), strings.Join(want, "\n"))
	}
}

// One client certificate holds at most --max-streams-per-client streams on
// a node; another client is not affected, and a closed stream frees its
// slot.
func TestStreamsPerClientCap(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir := certs(t, cfg.ID)
	secure(&cfg, files(dir, cfg.ID))
	cfg.MaxStreamsPerClient = 2
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	client := func(role string) shoalv1.ShoalClient {
		tr, err := files(dir, role).Transport()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return shoalv1.NewShoalClient(conn)
	}
	viewer, operator := client("viewer"), client("operator")
	open := func(c shoalv1.ShoalClient) (context.CancelFunc, shoalv1.Shoal_WatchSandboxesClient) {
		wctx, cancel := context.WithCancel(ctx)
		st, err := c.WatchSandboxes(wctx, &shoalv1.WatchSandboxesRequest{Name: "absent"})
		if err != nil {
			t.Fatal(err)
		}
		return cancel, st
	}
	// refused reports whether a stream ended with RESOURCE_EXHAUSTED
	// within a short while (a held stream stays open and silent).
	refused := func(st shoalv1.Shoal_WatchSandboxesClient) error {
		got := make(chan error, 1)
		go func() { _, err := st.Recv(); got <- err }()
		select {
		case err := <-got:
			return err
		case <-time.After(2 * time.Second):
			return nil
		}
	}
	c1, s1 := open(viewer)
	defer c1()
	c2, s2 := open(viewer)
	defer c2()
	if err := refused(s1); err != nil {
		t.Fatalf("first viewer watch: %v", err)
	}
	if err := refused(s2); err != nil {
		t.Fatalf("second viewer watch: %v", err)
	}
	c3, s3 := open(viewer)
	defer c3()
	if err := refused(s3); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-client") {
		t.Fatalf("third viewer watch: %v, want RESOURCE_EXHAUSTED naming --max-streams-per-client", err)
	}
	c4, s4 := open(operator)
	defer c4()
	if err := refused(s4); err != nil {
		t.Fatalf("another client's watch: %v", err)
	}
	// The same certificate from another address is another client.
	tr, err := files(dir, "viewer").Transport()
	if err != nil {
		t.Fatal(err)
	}
	from2 := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conn2, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return from2.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	c6, s6 := open(shoalv1.NewShoalClient(conn2))
	defer c6()
	if err := refused(s6); err != nil {
		t.Fatalf("the viewer certificate from 127.0.0.2: %v", err)
	}
	c1()
	testenv.Eventually(t, 30*time.Second, "a closed stream frees its slot", func() (bool, error) {
		c5, s5 := open(viewer)
		err := refused(s5)
		if err != nil {
			c5()
		}
		return err == nil, err
	})
}

// A TLS node whose certificate is not valid for a host it advertises is
// refused at start, naming the flag and the host: the nodes and clients
// that dial it there would refuse it.
func TestNodeCertificateCoversItsAdvertisedHosts(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	secure(&cfg, files(certs(t, cfg.ID), cfg.ID))
	for _, c := range []struct{ flag, host string }{{"--advertise", "elsewhere.example"}, {"--etcd-advertise-peer", "10.9.9.9"}} {
		bad := cfg
		switch c.flag {
		case "--advertise":
			bad.Advertise = c.host + ":7443"
		default:
			bad.EtcdAdvertisePeer = "https://" + c.host + ":2380"
		}
		_, err := node.New(bad)
		if err == nil || !strings.Contains(err.Error(), "not valid for "+c.host+", which "+c.flag+" advertises") {
			t.Errorf("%s %s: %v", c.flag, c.host, err)
		}
	}
	ok := cfg
	ok.Advertise = cfg.ID + ":7443" // the node id is one of its names
	if _, err := node.New(ok); err != nil {
		t.Errorf("--advertise %s: %v", ok.Advertise, err)
	}
}
