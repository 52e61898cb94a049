package hosts_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/dockerproxy"
	"shoal/chaos/hosts"
	"shoal/docker"
	"shoal/internal/testenv"
)

// The hosts and every fault on them: 3 voters and a worker, each in a
// container of its own with its own engine; a sandbox placed on node 2
// through node 0 is on node 2's engine only, and exec through node 1 is
// forwarded to it; node 2 disconnected is unreachable and freezes its
// sandbox within its node TTL + 2s, and thaws it once reconnected; a voter
// stopped answers nothing until resumed; a voter killed serves again once
// started; SlowPeer slows a voter's peer traffic and Unslow undoes it;
// Restore brings back a voter left cut off and frozen;
// ReplaceMember leaves three healthy voters. Every node talks to its
// engine through a proxy of the test's (Config.DockerSocket). Close leaves
// nothing behind.
func TestHosts(t *testing.T) {
	sys := testenv.RequireDocker(t)
	cfg := hosts.DefaultConfig(testenv.Binary(t))
	cfg.Workers = 1
	cfg.Logf = t.Logf
	cfg.RequireEngines = os.Getenv(testenv.EnvRequireEngines) == "1"
	// Every node reaches its engine through a Docker API proxy of the
	// test's, which counts its calls.
	var calls [8]atomic.Int64
	cfg.DockerSocket = func(ctx context.Context, n hosts.NodeInfo) (string, error) {
		dir, err := os.MkdirTemp("", "shoal-dproxy-")
		if err != nil {
			return "", err
		}
		sock := filepath.Join(dir, "docker.sock")
		p, err := dockerproxy.Start(sock, n.EngineSocket)
		if err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		p.SetRule(func(*http.Request) dockerproxy.Rule { calls[n.Index].Add(1); return dockerproxy.Rule{} })
		// Registered before the cluster's cleanup, so it runs after.
		t.Cleanup(func() { p.Close(); os.RemoveAll(dir) })
		return sock, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t0 := time.Now()
	c, err := hosts.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster of %d started in %s (separate engines: %v %s)", c.Len(), since(t0), c.SeparateEngines(), c.SharedReason())
	t.Cleanup(func() { closeAndCheck(t, sys, c) })
	if err := c.WaitAllHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("node %d calls its engine through the test's proxy", i), func() error {
			if calls[i].Load() == 0 {
				return errors.New("no call yet")
			}
			return nil
		})
	}

	// Placed on node 2 through node 0; its container is on node 2's
	// engine only.
	sb, err := c.Client(0).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "on-two"},
		Spec: &shoalv1.SandboxSpec{Node: c.ID(2)},
	}})
	if err != nil {
		t.Fatalf("create a sandbox on node 2 through node 0: %v", err)
	}
	if sb.Status.Phase != shoalv1.SandboxPhase_READY || sb.Status.Node != c.ID(2) {
		t.Fatalf("sandbox: phase %s on %q (%s), want READY on %s", sb.Status.Phase, sb.Status.Node, sb.Status.Message, c.ID(2))
	}
	cid := sb.Status.ContainerId
	onlyOn(t, ctx, c, 2, cid)

	// Exec through node 1 is forwarded to node 2.
	out, code := execThrough(t, ctx, c.Client(1), "on-two", "echo", "forwarded")
	if out != "forwarded\n" || code != 0 {
		t.Fatalf("exec through node 1: %q, exit %d; want \"forwarded\\n\", 0", out, code)
	}

	// Node 2 cut off the network: unreachable, and it freezes its sandbox
	// within its node TTL (+2s) since it cannot renew its lease.
	t0 = time.Now()
	if err := c.Disconnect(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := listThrough(ctx, c.Client(2), time.Second); err == nil {
		t.Fatal("node 2's API answers while it is disconnected")
	}
	testenv.Eventually(t, cfg.NodeTTL+2*time.Second, "node 2's sandbox container paused", func() error {
		return containerState(ctx, c.Engine(2), cid, true)
	})
	t.Logf("disconnect → node 2's sandbox paused: %s (node TTL %s)", since(t0), cfg.NodeTTL)
	getMeanwhile(t, ctx, c, 0, "node 2 is disconnected")
	t0 = time.Now()
	if err := c.Reconnect(ctx, 2); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "node 2's sandbox running and READY again", func() error {
		if err := containerState(ctx, c.Engine(2), cid, false); err != nil {
			return err
		}
		sb, err := get(ctx, c.Client(2), "on-two")
		if err != nil {
			return err
		}
		if sb.Status.Phase != shoalv1.SandboxPhase_READY {
			return fmt.Errorf("phase %s (%s)", sb.Status.Phase, sb.Status.Message)
		}
		return nil
	})
	t.Logf("reconnect → node 2 serves and its sandbox is READY, unpaused: %s", since(t0))

	// Voter 1 stopped: it answers nothing; the others serve.
	if err := c.Stop(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := listThrough(ctx, c.Client(1), time.Second); err == nil {
		t.Fatal("voter 1 answers while stopped")
	}
	getMeanwhile(t, ctx, c, 0, "voter 1 is stopped")
	t0 = time.Now()
	if err := c.Resume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("resume → voter 1 serves: %s", since(t0))

	// What a fault that failed half-way may leave: voter 1 cut off and
	// frozen. Restore thaws and reconnects it; on a whole node (voter 0)
	// it does nothing.
	if err := c.Disconnect(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for _, i := range []int{0, 1} {
		if err := c.Restore(ctx, i); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitServing(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Disconnect(ctx, 1); err != nil {
		t.Fatalf("voter 1 is not back on the network after Restore: %v", err)
	}
	if err := c.Restore(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore → voter 1, left cut off and frozen, serves: %s", since(t0))

	// Voter 0 killed: unreachable; started again it serves on its data.
	t0 = time.Now()
	if err := c.Kill(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("kill of voter 0 took %s", since(t0))
	if err := listThrough(ctx, c.Client(0), time.Second); err == nil {
		t.Fatal("voter 0 answers while killed")
	}
	// The worker's etcd client may have been talking to voter 0: until it
	// fails over and renews its liveness lease, the worker fences itself
	// (UNAVAILABLE, "ask another node"), as it must. It serves within the
	// deadline once the client has moved to a live member.
	getMeanwhile(t, ctx, c, 3, "voter 0 is dead")
	t0 = time.Now()
	if err := c.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("start → voter 0 serves again: %s", since(t0))
	if sb, err := get(ctx, c.Client(0), "on-two"); err != nil || sb.Status.ContainerId != cid {
		t.Fatalf("get through the restarted voter 0: %v (%v)", sb.GetStatus(), err)
	}

	// SlowPeer: voter 1's peer port answers later by the delay each way
	// (the proxy's own dial to the member overlaps the first delay, so
	// the round trip grows by up to 2×delay, to at least 2×delay).
	const delay = 100 * time.Millisecond
	base := peerRTT(t, ctx, c.PeerURL(1))
	if err := c.SlowPeer(1, delay); err != nil {
		t.Fatal(err)
	}
	slow := peerRTT(t, ctx, c.PeerURL(1))
	if slow < 2*delay {
		t.Fatalf("round trip to voter 1's peer port: %s slowed, %s before; want at least %s", slow, base, 2*delay)
	}
	t.Logf("voter 1's peer round trip: %s, %s with SlowPeer(%s)", base, slow, delay)
	t0 = time.Now()
	if _, err := c.Client(0).CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "while-slow"}, Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"K": "V"},
	}}); err != nil {
		t.Fatalf("create a provider while voter 1 is slow: %v", err)
	}
	t.Logf("a provider created while voter 1 is slow in %s", since(t0))
	if err := c.Unslow(1); err != nil {
		t.Fatal(err)
	}
	if rtt := peerRTT(t, ctx, c.PeerURL(1)); rtt >= base+delay {
		t.Fatalf("round trip to voter 1's peer port after Unslow: %s, want under %s", rtt, base+delay)
	}

	// Voter 1 replaced for good: three healthy voters, none a learner.
	t0 = time.Now()
	k, err := c.ReplaceMember(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ReplaceMember(1) → node %d (%s) serving in %s", k, c.ID(k), since(t0))
	t0 = time.Now()
	if err := c.WaitAllHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("then all healthy in %s", since(t0))
	if !c.Removed(1) || c.Voter(k) != true || c.Engine(1) != nil && c.SeparateEngines() {
		t.Fatalf("after ReplaceMember: node 1 removed %v, node %d voter %v", c.Removed(1), k, c.Voter(k))
	}
	if err := c.Kill(ctx, 1); !errors.Is(err, hosts.ErrRemoved) {
		t.Fatalf("Kill of the replaced node: %v, want ErrRemoved", err)
	}
	members := memberNames(t, ctx, c.EtcdEndpoints())
	if want := sorted(c.ID(0), c.ID(2), c.ID(k)); !slices.Equal(members, want) {
		t.Fatalf("etcd members %v, want %v", members, want)
	}
	if sb, err := get(ctx, c.Client(k), "on-two"); err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("get through the new voter: %v (%v)", sb.GetStatus(), err)
	}
}

// getMeanwhile gets the sandbox through node i while another node is
// frozen or cut off. A try may hang: the node's etcd client spreads its
// requests over every member and, with no keepalive, cannot tell that one
// will not answer; the next try goes to another member.
func getMeanwhile(t *testing.T, ctx context.Context, c *hosts.Cluster, i int, while string) {
	t.Helper()
	t0 := time.Now()
	tries := 0
	testenv.Eventually(t, 15*time.Second, "get through node "+fmt.Sprint(i)+" while "+while, func() error {
		tries++
		_, err := getWithin(ctx, c.Client(i), "on-two", 2*time.Second)
		return err
	})
	t.Logf("get through node %d while %s: served at try %d, after %s", i, while, tries, since(t0))
}

func since(t0 time.Time) time.Duration { return time.Since(t0).Round(time.Millisecond) }

func sorted(s ...string) []string { sort.Strings(s); return s }

// closeAndCheck closes the cluster and checks that nothing of the run is
// left: no node container, no network, no directory.
func closeAndCheck(t *testing.T, sys *client.Client, c *hosts.Cluster) {
	t0 := time.Now()
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	t.Logf("closed in %s", since(t0))
	ctx := context.Background()
	run := filters.NewArgs(filters.Arg("label", hosts.LabelRun+"="+c.Run()))
	if cs, err := sys.ContainerList(ctx, container.ListOptions{All: true, Filters: run}); err != nil || len(cs) != 0 {
		t.Errorf("after Close: %d node containers left (%v)", len(cs), err)
	}
	if ns, err := sys.NetworkList(ctx, network.ListOptions{Filters: run}); err != nil || len(ns) != 0 {
		t.Errorf("after Close: %d networks left (%v)", len(ns), err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close: %s is still there (%v)", c.Dir(), err)
	}
}

// onlyOn checks that container id runs on node i's engine and, when the
// engines are separate, on no other.
func onlyOn(t *testing.T, ctx context.Context, c *hosts.Cluster, i int, id string) {
	t.Helper()
	info, err := c.Engine(i).ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("container %.12s on node %d's engine: %v", id, i, err)
	}
	if !info.State.Running || info.Config.Labels[docker.LabelNode] != c.ID(i) {
		t.Fatalf("container %.12s on node %d's engine: running %v, node label %q", id, i, info.State.Running, info.Config.Labels[docker.LabelNode])
	}
	if !c.SeparateEngines() {
		t.Logf("the nodes share one engine (%s): not checking that the others lack %.12s", c.SharedReason(), id)
		return
	}
	for j := range c.Len() {
		if j == i {
			continue
		}
		if _, err := c.Engine(j).ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
			t.Fatalf("container %.12s of node %d is visible on node %d's engine (err %v)", id, i, j, err)
		}
	}
}

// containerState is nil when the container runs and is paused (or not)
// as wanted.
func containerState(ctx context.Context, e *client.Client, id string, paused bool) error {
	info, err := e.ContainerInspect(ctx, id)
	if err != nil {
		return err
	}
	if !info.State.Running || info.State.Paused != paused {
		return fmt.Errorf("container %.12s is %s", id, info.State.Status)
	}
	return nil
}

func get(ctx context.Context, cl shoalv1.ShoalClient, name string) (*shoalv1.Sandbox, error) {
	return getWithin(ctx, cl, name, 5*time.Second)
}

func getWithin(ctx context.Context, cl shoalv1.ShoalClient, name string, within time.Duration) (*shoalv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return cl.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
}

func listThrough(ctx context.Context, cl shoalv1.ShoalClient, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := cl.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1})
	return err
}

func execThrough(t *testing.T, ctx context.Context, cl shoalv1.ShoalClient, name string, cmd ...string) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cl.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	var out bytes.Buffer
	for {
		ch, err := st.Recv()
		if err != nil {
			t.Fatalf("exec %v in %s: the stream ended before the exit code: %v", cmd, name, err)
		}
		out.Write(ch.Data)
		if ch.Exited {
			return out.String(), ch.ExitCode
		}
	}
}

// peerRTT is the median time of an HTTP GET of a member's /version at its
// advertised peer URL, each on a new connection.
func peerRTT(t *testing.T, ctx context.Context, url string) time.Duration {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	var rtts []time.Duration
	for range 5 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/version", nil)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s/version: %v", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

func memberNames(t *testing.T, ctx context.Context, endpoints []string) []string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("etcd member list: %v", err)
	}
	var names []string
	for _, m := range ml.Members {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return names
}
