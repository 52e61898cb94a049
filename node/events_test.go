package node_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/audit"
	"shoal/internal/testenv"
	"shoal/node"
)

// Over mutual TLS, reading events is a read: a viewer lists and watches
// them. A delete's DeleteRequested names who asked (the operator's
// certificate subject and role) and the request id its audit record
// carries.
func TestDeleteRequestedNamesTheCaller(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir := certs(t, cfg.ID)
	secure(&cfg, files(dir, cfg.ID))
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	as := func(role string) shoalv1.ShoalClient {
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
	operator, viewer := as("operator"), as("viewer")
	watch, err := viewer.WatchEvents(ctx, &shoalv1.WatchEventsRequest{Sandbox: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "s"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := operator.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "s", Wait: true}); err != nil {
		t.Fatal(err)
	}
	var del *shoalv1.Event
	for del == nil {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatalf("the viewer's watch: %v", err)
		}
		if ev.Reason == "DeleteRequested" {
			del = ev
		}
	}
	if del.Details["role"] != "operator" || !strings.Contains(del.Details["by"], "O=operator") || !strings.Contains(del.Message, "O=operator") ||
		del.Details["through"] != "sandbox delete" || del.Details["request_id"] == "" || del.ReportingNode != cfg.ID {
		t.Fatalf("DeleteRequested: %v", del)
	}
	list, err := viewer.ListEvents(ctx, &shoalv1.ListEventsRequest{Sandbox: "s"})
	if err != nil {
		t.Fatalf("the viewer lists events: %v", err)
	}
	if len(list.Items) == 0 || list.Items[0].Reason != "Scheduled" {
		t.Fatalf("the viewer's list: %v", list.Items)
	}

	n.Stop()
	data, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(r.Method, "/DeleteSandbox") && r.RequestID == del.Details["request_id"] {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit record of DeleteSandbox with the event's request id %s:\n%s", del.Details["request_id"], data)
	}
}
