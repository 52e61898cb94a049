package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/tcpproxy"
	"shoal/cli"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

// i. --endpoint a,b,c with the first addresses down: commands work through
// the one that is up; a create carries a request id (a retry after a cut
// connection returns the same sandbox: store.TestCreateRetriedWithItsRequestID).
func TestEndpointListFailsOver(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	down1 := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	down2 := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ep := down1 + "," + down2 + "," + n.Addr()
	run(t, bin, ep, "sandbox", "create", "via-list", "--wait").must(t, 0, "create through an endpoint list")
	r := run(t, bin, ep, "sandbox", "get", "via-list", "-o", "json").must(t, 0, "get through an endpoint list")
	var sb struct{ Meta struct{ Uid string } }
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil || sb.Meta.Uid == "" {
		t.Fatalf("get: %v\n%s", err, r.stdout)
	}
	run(t, bin, ep, "sandbox", "exec", "via-list", "--", "true").must(t, 0, "exec through an endpoint list")
	run(t, bin, ep, "sandbox", "delete", "via-list", "--wait").must(t, 0, "delete through an endpoint list")
	run(t, bin, down1+","+down2, "sandbox", "list").must(t, cli.ExitUnavailable, "every endpoint down")
}

// runAsync is run in the background: the result arrives on the channel
// once the command exits (the test waits for it; the command is bounded
// by runWith's own timeout).
func runAsync(t *testing.T, bin, endpoint string, args ...string) <-chan result {
	t.Helper()
	out := make(chan result, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = []string{"SHOAL_ENDPOINT=" + endpoint, "PATH=/usr/bin:/bin"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code, stderr = -1, *bytes.NewBufferString(err.Error())
		}
		out <- result{stdout.String(), stderr.String(), code}
	})
	return out
}

// i, over a cluster of node processes: with --endpoint listing a killed
// node first, every kind of command works through the next ones. A create
// whose connection is cut after the first attempt wrote the sandbox (its
// owner is frozen, so the wait for READY holds the call open) is retried
// by the CLI through the next node with the same request id, and returns
// the sandbox the first attempt made: the same uid, not ALREADY_EXISTS.
func TestEndpointListOverACluster(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	front, err := tcpproxy.Start(c.Addr(1)) // node 1, through a connection the test can cut
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	c.Kill(0)
	ep := c.Addr(0) + "," + front.Addr() + "," + c.Addr(2)

	run(t, bin, ep, "provider", "create", "keys", "--type", "generic", "--credential", "K=V").must(t, 0, "provider create")
	run(t, bin, ep, "provider", "list").must(t, 0, "provider list")
	run(t, bin, ep, "sandbox", "create", "listed", "--provider", "keys", "--node", c.ID(2), "--wait").must(t, 0, "sandbox create")
	if r := run(t, bin, ep, "sandbox", "exec", "listed", "--", "sh", "-c", "echo $K").must(t, 0, "sandbox exec"); r.stdout != "V\n" {
		t.Fatalf("exec printed %q", r.stdout)
	}
	if r := run(t, bin, ep, "sandbox", "list").must(t, 0, "sandbox list"); !strings.Contains(r.stdout, "listed") {
		t.Fatalf("sandbox list:\n%s", r.stdout)
	}
	run(t, bin, ep, "node", "list").must(t, 0, "node list")
	if _, err := clusterStatus(t, bin, ep); err != nil {
		t.Fatalf("cluster status: %v", err)
	}
	run(t, bin, ep, "sandbox", "delete", "listed", "--wait").must(t, 0, "sandbox delete --wait")
	run(t, bin, ep, "provider", "delete", "keys").must(t, 0, "provider delete")

	// The retried create. Node 2 owns the sandbox and is frozen, so the
	// first attempt, through node 1, writes it and then waits.
	st := store.New(c.Etcd(), store.Options{})
	c.Stop(2)
	done := runAsync(t, bin, ep, "sandbox", "create", "retried", "--node", c.ID(2), "--wait", "-o", "json")
	var uid string
	testenv.Eventually(t, 30*time.Second, "the first attempt wrote the sandbox", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sb, err := st.GetSandbox(ctx, store.DefaultWorkspace, "retried")
		if err != nil {
			return false, err
		}
		uid = sb.Meta.Uid
		return sb.Status.GetPhase() == shoalv1.SandboxPhase_PROVISIONING, fmt.Errorf("phase %s", sb.Status.GetPhase())
	})
	front.SetDown(true) // the call in flight through node 1 is cut
	c.Resume(2)
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the retried create did not return within a minute")
	}
	r.must(t, 0, "sandbox create retried after a cut connection")
	sb := sandboxJSON(t, r)
	if sb.Meta.Uid != uid || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("the retried create returned uid %s phase %s; the first attempt made %s", sb.Meta.Uid, sb.Status.Phase, uid)
	}
	got := sandboxJSON(t, run(t, bin, ep, "sandbox", "get", "retried", "-o", "json").must(t, 0, "get the retried sandbox"))
	if got.Meta.Uid != uid {
		t.Fatalf("the stored sandbox has uid %s, the create returned %s", got.Meta.Uid, uid)
	}
	// One container for it, on its owner's engine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Engine(2).Client.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelName+"=retried"), filters.Arg("label", docker.LabelNode+"="+c.ID(2)))})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Labels[docker.LabelUID] != uid {
		t.Fatalf("%d containers of the retried sandbox on its owner's engine, want one of uid %s: %v", len(cs), uid, cs)
	}
}
