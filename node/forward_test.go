package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/audit"
	"shoal/internal/testenv"
	"shoal/node"
)

// execThrough runs cmd in a sandbox through one node's API and returns
// stdout, stderr and the exit code.
func execThrough(ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) (string, string, int32, error) {
	stream, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		return "", "", 0, err
	}
	var out, errb strings.Builder
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			return out.String(), errb.String(), 0, fmt.Errorf("stream ended without an exit code")
		}
		if err != nil {
			return out.String(), errb.String(), 0, err
		}
		if ch.Exited {
			return out.String(), errb.String(), ch.ExitCode, nil
		}
		if ch.Stream == "stderr" {
			errb.Write(ch.Data)
		} else {
			out.Write(ch.Data)
		}
	}
}

// c. Exec and logs through a node that does not own the sandbox, with a
// Docker engine per node: only forwarding can reach the container. A
// NotReady owner is UNAVAILABLE naming it.
func TestExecAndLogsThroughANonOwner(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2, Args: []string{"--node-ttl", "2s"}})
	if !c.SeparateEngines() {
		t.Log("nodes share one Docker engine here: forwarding is exercised, engine separation is not")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	front, owner := c.Client(0), c.ID(1)
	sb, err := front.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "far"},
		Spec: &shoalv1.SandboxSpec{Node: owner, Command: []string{"sh", "-c", "echo started-on-far; exec sleep 3600"}},
	}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY || sb.Status.Node != owner {
		t.Fatalf("create through node 0 onto node 1: %v %v", sb.GetStatus(), err)
	}
	if c.SeparateEngines() {
		if _, err := c.Engine(0).Client.ContainerInspect(ctx, sb.Status.ContainerId); err == nil {
			t.Fatal("the container is on node 0's engine too")
		}
		if _, err := c.Engine(1).Client.ContainerInspect(ctx, sb.Status.ContainerId); err != nil {
			t.Fatalf("the container is not on its owner's engine: %v", err)
		}
	}
	out, errOut, code, err := execThrough(ctx, front, "far", "sh", "-c", "echo out; echo err >&2; exit 7")
	if err != nil || out != "out\n" || errOut != "err\n" || code != 7 {
		t.Fatalf("exec through a non-owner: %q %q %d %v", out, errOut, code, err)
	}
	// 4 MiB byte for byte.
	out, _, code, err = execThrough(ctx, front, "far", "sh", "-c", "dd if=/dev/urandom of=blob.bin bs=1024 count=4096 2>/dev/null; cat blob.bin")
	if err != nil || code != 0 || len(out) != 4<<20 {
		t.Fatalf("large exec through a non-owner: %d bytes, code %d, %v", len(out), code, err)
	}
	sum, _, _, err := execThrough(ctx, c.Client(1), "far", "sha256sum", "blob.bin")
	if err != nil || !strings.HasPrefix(sum, fmt.Sprintf("%x", sha256.Sum256([]byte(out)))) {
		t.Fatalf("forwarded output differs from the file: %q %v", sum, err)
	}
	logs, err := front.Logs(ctx, &shoalv1.LogsRequest{Name: "far"})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for {
		ch, err := logs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("logs through a non-owner: %v", err)
		}
		got.Write(ch.Data)
	}
	if got.String() != "started-on-far\n" {
		t.Fatalf("logs through a non-owner: %q", got.String())
	}

	// The owner is killed: once its lease is gone, calls through another
	// node say which node is missing.
	c.Kill(1)
	testenv.Eventually(t, 30*time.Second, "owner NotReady", func() (bool, error) {
		n, err := c.ClusterClient(0).GetNode(ctx, &shoalv1.GetNodeRequest{Name: owner})
		return err == nil && !n.Status.Ready, err
	})
	_, _, _, err = execThrough(ctx, front, "far", "true")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), owner) || !strings.Contains(err.Error(), "NotReady") {
		t.Fatalf("exec on a NotReady owner: %v", err)
	}
}

// An exec forwarded to the sandbox's owner has one request id in both
// nodes' audit lines (the forwarder's, returned to the client too), and a
// client's own id is kept through the forward. (Hollow runtime, a voter
// and a worker.)
func TestForwardedCallKeepsItsRequestID(t *testing.T) {
	t.Parallel()
	fcfg := testenv.NodeConfig(t)
	fcfg.Runtime = node.RuntimeHollow
	fcfg.AuditLog = filepath.Join(t.TempDir(), "front-audit.log")
	front := testenv.StartNode(t, fcfg)
	ocfg := testenv.NodeConfig(t)
	ocfg.ID += "-o"
	ocfg.Runtime = node.RuntimeHollow
	ocfg.EtcdEndpoints = []string{front.EtcdEndpoint()}
	ocfg.AuditLog = filepath.Join(t.TempDir(), "owner-audit.log")
	testenv.StartNode(t, ocfg)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := front.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "far"}, Spec: &shoalv1.SandboxSpec{Node: ocfg.ID}}}); err != nil {
		t.Fatal(err)
	}
	// execIDs runs an exec through the front node and returns the request
	// id the client got back and the ids of the two nodes' Exec records.
	execIDs := func(ctx context.Context, marker string) (string, string, string) {
		t.Helper()
		nFront, nOwner := len(execRecords(t, fcfg.AuditLog, "")), len(execRecords(t, ocfg.AuditLog, fcfg.ID))
		stream, err := front.Client.Exec(ctx, &shoalv1.ExecRequest{Name: "far", Command: []string{"echo", marker}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ch, err := stream.Recv()
			if err != nil {
				t.Fatalf("exec through the front node: %v", err)
			}
			if ch.Exited {
				break
			}
		}
		hdr, err := stream.Header()
		if err != nil {
			t.Fatal(err)
		}
		got := hdr.Get(apiserver.RequestIDHeader)
		if len(got) != 1 {
			t.Fatalf("response header %s: %v", apiserver.RequestIDHeader, got)
		}
		var frontID, ownerID string
		testenv.Eventually(t, 30*time.Second, "both nodes audit the exec", func() (bool, error) {
			frontRecs, ownerRecs := execRecords(t, fcfg.AuditLog, ""), execRecords(t, ocfg.AuditLog, fcfg.ID)
			if len(frontRecs) <= nFront || len(ownerRecs) <= nOwner {
				return false, fmt.Errorf("%d records on the front node, %d forwarded ones on the owner; %d and %d before", len(frontRecs), len(ownerRecs), nFront, nOwner)
			}
			frontID, ownerID = frontRecs[len(frontRecs)-1].RequestID, ownerRecs[len(ownerRecs)-1].RequestID
			return true, nil
		})
		return got[0], frontID, ownerID
	}
	got, frontID, ownerID := execIDs(ctx, "one")
	if frontID != got || ownerID != got {
		t.Fatalf("request ids: the client got %q, the front node audited %q, the owner %q; want one id", got, frontID, ownerID)
	}
	got, frontID, ownerID = execIDs(metadata.AppendToOutgoingContext(ctx, apiserver.RequestIDHeader, "client-chosen-id"), "two")
	if got != "client-chosen-id" || frontID != got || ownerID != got {
		t.Fatalf("a client's request id: the client got %q, the front node audited %q, the owner %q; want client-chosen-id", got, frontID, ownerID)
	}
}

// execRecords are the Exec records of an audit log; with by, only those
// forwarded by that node, otherwise only those not forwarded.
func execRecords(t *testing.T, path, by string) []audit.Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if strings.HasSuffix(r.Method, "/Exec") && r.ForwardedBy == by {
			out = append(out, r)
		}
	}
	return out
}
