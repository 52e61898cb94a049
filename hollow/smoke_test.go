package hollow_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/node"
)

// The hollow smoke run (the scale run's small sibling, part of make
// test): five hollow nodes on one etcd, 200 sandboxes created through all
// of them, placed over all five, READY, exec'd through a node that does
// not own them (forwarded: each node's containers live only in its own
// process), one node lost and its sandboxes UNKNOWN, and all deleted.
func TestHollowSmoke(t *testing.T) {
	const nodes, sandboxes = 5, 200
	_, etcd := testenv.Etcd(t)
	var cfgs []node.Config
	for i := range nodes {
		cfg := testenv.NodeConfig(t)
		cfg.ID = fmt.Sprintf("%s-h%d", cfg.ID, i)
		cfg.EtcdEndpoints = []string{"http://" + etcd.Endpoint()}
		cfg.Runtime = node.RuntimeHollow
		cfg.HollowLatency = 5 * time.Millisecond
		cfg.NodeTTL = 2 * time.Second
		cfgs = append(cfgs, cfg)
	}
	ns := testenv.StartNodes(t, cfgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := clusterClient(t, ns[0].Addr())

	nl, err := cluster.ListNodes(ctx, &shoalv1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nl.Items) != nodes {
		t.Fatalf("node list: %d nodes, want %d", len(nl.Items), nodes)
	}
	for _, n := range nl.Items {
		if n.Labels[node.RuntimeLabel] != node.RuntimeHollow || !n.Status.Ready {
			t.Errorf("node %s: labels %v, ready %v; want labelled %s=%s and Ready", n.Name, n.Labels, n.Status.Ready, node.RuntimeLabel, node.RuntimeHollow)
		}
	}

	if _, err := ns[0].Client.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "nv"}, Type: shoalv1.ProviderType_NVIDIA, Credentials: map[string]string{"NVIDIA_API_KEY": "hollow-secret"}}}); err != nil {
		t.Fatal(err)
	}
	// Each node places from its own watch cache's view of the live nodes,
	// which a node that registered last reaches a moment later: the
	// spread below is only fair once every node sees all of them (CI: two
	// nodes seen late by the other three got 16 sandboxes each). A probe
	// sandbox created through a node says in its Scheduled event how many
	// nodes that node chose among.
	for i, n := range ns {
		attempt := 0
		testenv.Eventually(t, time.Minute, fmt.Sprintf("node %s places among all %d nodes", n.Config.ID, nodes), func() error {
			attempt++
			name := fmt.Sprintf("probe-%d-%d", i, attempt)
			if _, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}}); err != nil {
				return err
			}
			defer func() {
				if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true}); err != nil {
					t.Errorf("delete %s: %v", name, err)
				}
			}()
			var last string
			for range 50 { // the event is recorded beside the create, not in it
				evs, err := n.Client.ListEvents(ctx, &shoalv1.ListEventsRequest{Sandbox: name})
				if err != nil {
					return err
				}
				for _, ev := range evs.Items {
					if ev.Reason == string(events.Scheduled) {
						if last = ev.Message; strings.Contains(last, fmt.Sprintf("of the %d nodes", nodes)) {
							return nil
						}
						return fmt.Errorf("%s: %s", name, last)
					}
				}
				<-time.After(testenv.PollInterval)
			}
			return fmt.Errorf("%s: no Scheduled event", name)
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, sandboxes)
	for i := range sandboxes {
		wg.Go(func() {
			_, err := ns[i%nodes].Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
				Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("s%03d", i)}, Spec: &shoalv1.SandboxSpec{Providers: []string{"nv"}}}})
			if err != nil {
				errs <- fmt.Errorf("create s%03d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	testenv.Eventually(t, 2*time.Minute, "all sandboxes READY", func() (bool, error) {
		clear(perNode)
		ready := 0
		page, err := ns[1].Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000})
		if err != nil {
			return false, err
		}
		for _, sb := range page.Items {
			perNode[sb.Spec.Node]++
			if sb.Status.Phase == shoalv1.SandboxPhase_READY {
				ready++
			}
		}
		return ready == sandboxes, fmt.Errorf("%d of %d READY", ready, sandboxes)
	})
	t.Logf("placed per node: %v", perNode)
	if len(perNode) != nodes {
		t.Errorf("placed on %d nodes, want all %d: %v", len(perNode), nodes, perNode)
	}
	for id, n := range perNode {
		if n < sandboxes/nodes/2 {
			t.Errorf("node %s got %d of %d sandboxes; placement puts the fewest first: %v", id, n, sandboxes, perNode)
		}
	}

	// Exec through a node that does not own the sandbox.
	sb, err := ns[0].Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s007"})
	if err != nil {
		t.Fatal(err)
	}
	via := ns[0]
	for _, n := range ns {
		if n.Config.ID != sb.Spec.Node {
			via = n
			break
		}
	}
	out, code := execIn(t, ctx, via.Client, "s007", "env")
	if code != 0 || !strings.Contains(out, "NVIDIA_API_KEY=hollow-secret") {
		t.Errorf("exec env through %s (owner %s): exit %d, output %q", via.Config.ID, sb.Spec.Node, code, out)
	}
	if _, code := execIn(t, ctx, via.Client, "s007", "false"); code != 1 {
		t.Errorf("exec false: exit %d", code)
	}

	// One hollow node lost: its sandboxes UNKNOWN, the others untouched.
	lost := ns[4]
	lost.Stop()
	testenv.Eventually(t, time.Minute, "the stopped node's sandboxes UNKNOWN", func() (bool, error) {
		page, err := ns[0].Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000})
		if err != nil {
			return false, err
		}
		unknown, other := 0, 0
		for _, sb := range page.Items {
			switch {
			case sb.Spec.Node == lost.Config.ID && sb.Status.Phase == shoalv1.SandboxPhase_UNKNOWN:
				unknown++
			case sb.Spec.Node != lost.Config.ID && sb.Status.Phase != shoalv1.SandboxPhase_READY:
				other++
			}
		}
		return unknown == perNode[lost.Config.ID] && other == 0, fmt.Errorf("%d of %d UNKNOWN, %d others not READY", unknown, perNode[lost.Config.ID], other)
	})

	// Delete every sandbox (the lost node's complete once it is fenced),
	// then the provider.
	var dwg sync.WaitGroup
	derrs := make(chan error, sandboxes)
	for i := range sandboxes {
		dwg.Go(func() {
			if _, err := ns[i%(nodes-1)].Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: fmt.Sprintf("s%03d", i), Wait: true}); err != nil {
				derrs <- fmt.Errorf("delete s%03d: %w", i, err)
			}
		})
	}
	dwg.Wait()
	close(derrs)
	for err := range derrs {
		t.Fatal(err)
	}
	if _, err := ns[0].Client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "nv"}); err != nil {
		t.Errorf("provider delete after every sandbox is gone: %v", err)
	}
}

func clusterClient(t *testing.T, addr string) shoalv1.ClusterClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return shoalv1.NewClusterClient(conn)
}

func execIn(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) (string, int32) {
	t.Helper()
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		r, err := st.Recv()
		if err == io.EOF {
			t.Fatalf("exec %v in %s: stream ended without an exit code", cmd, name)
		}
		if err != nil {
			t.Fatalf("exec %v in %s: %v", cmd, name, err)
		}
		if r.GetStream() == "stdout" {
			out.Write(r.GetData())
		}
		if r.GetExited() {
			return out.String(), r.GetExitCode()
		}
	}
}
