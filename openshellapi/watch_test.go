package openshellapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// A watch of a sandbox that has not changed since before the serving
// node's watch cache started, its revision compacted away in etcd since:
// the changes follow on from the revision the first message was read at,
// not from the record's own (which no cache log or etcd history holds).
func TestWatchOfAnOldSandbox(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n0 := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	old, err := n0.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "old"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Later writes, then etcd forgets every revision before the last.
	for i := range 5 {
		if _, err := n0.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("later-%d", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n0.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	got, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision <= old.Meta.ResourceVersion {
		t.Fatalf("etcd at revision %d, the sandbox at %d: nothing to compact", got.Header.Revision, old.Meta.ResourceVersion)
	}
	if _, err := cli.Compact(ctx, got.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// A node whose cache starts now, and a watch through it.
	wcfg := testenv.NodeConfig(t)
	wcfg.ID += "-w"
	wcfg.Runtime = node.RuntimeHollow
	wcfg.EtcdEndpoints = []string{n0.EtcdEndpoint()}
	w := testenv.StartNodes(t, wcfg)[0]
	osw := openshellv1.NewOpenShellClient(dial(t, w))
	// A tail past the most refused up front, naming the field (a uint32
	// that once wrapped negative and failed after the first message).
	bad, err := osw.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: old.Meta.Uid, FollowLogs: true, LogTailLines: 1 << 31})
	if err == nil {
		_, err = bad.Recv()
	}
	wantCode(t, "log_tail_lines 2^31", err, codes.InvalidArgument, "log_tail_lines")
	st, err := osw.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: old.Meta.Uid, FollowStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil || first.GetSandbox().GetMetadata().GetId() != old.Meta.Uid {
		t.Fatalf("first message: %v %v", first, err)
	}
	if _, err := n0.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "old", SetLabels: map[string]string{"touched": "yes"}}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("the watch after its first message: %v", err)
		}
		if ev.GetSandbox().GetMetadata().GetLabels()["touched"] == "yes" {
			return
		}
	}
}

// The audit log names what OpenShell's calls touch, as shoal.v1's records
// do, and a watch that follows a container's output is audited as the
// Logs call it also is.
func TestAuditOfOpenShellCalls(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)
	conn := dial(t, n)
	oc := openshellv1.NewOpenShellClient(conn)
	if _, err := oc.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "p"}, Type: "openai"}}); err != nil {
		t.Fatal(err)
	}
	sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "a", ProviderName: "p"}); err != nil {
		t.Fatal(err)
	}
	policy := pb(nil).entry(polNetwork, "a", networkPolicy("a", pb(nil).str(epHost, "api.example.com").num(epPort, 443)))
	if _, _, _, err := updateConfig(ctx, conn, pb(nil).str(ucName, "a").msg(ucPolicy, policy)); err != nil {
		t.Fatal(err)
	}
	for _, logs := range []bool{false, true} {
		st, err := oc.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: sb.Meta.Uid, FollowLogs: logs, StopOnTerminal: true})
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = st.Recv()
		}
	}
	want := map[string]string{
		"/openshell.v1.OpenShell/CreateProvider":        "default/p",
		"/openshell.v1.OpenShell/AttachSandboxProvider": "default/a",
		"/openshell.v1.OpenShell/UpdateConfig":          "default/a",
		"/openshell.v1.OpenShell/WatchSandbox":          "id:" + sb.Meta.Uid,
	}
	testenv.Eventually(t, 10*time.Second, "the audit records", func() (bool, error) {
		b, err := os.ReadFile(cfg.AuditLog)
		if err != nil {
			return false, nil
		}
		got := map[string]string{}
		watches := 0
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r struct{ Method, Object string }
			if json.Unmarshal([]byte(line), &r) == nil && strings.HasPrefix(r.Method, "/openshell.v1.") {
				got[r.Method] = r.Object
				if strings.HasSuffix(r.Method, "/WatchSandbox") {
					watches++
				}
			}
		}
		// One watch record: the one that followed logs; a plain watch is
		// a read, which is not audited.
		return maps.Equal(got, want) && watches == 1, nil
	})
}
