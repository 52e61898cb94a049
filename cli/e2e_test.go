package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/node"
)

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, bin, endpoint string, args ...string) result {
	t.Helper()
	return runWith(t, bin, endpoint, runOpts{}, args...)
}

// runOpts are the extras of a run: environment variables beyond
// SHOAL_ENDPOINT and PATH, and standard input.
type runOpts struct {
	env   []string
	stdin string
}

func runWith(t *testing.T, bin, endpoint string, o runOpts, args ...string) result {
	t.Helper()
	return runIn(t, bin, append([]string{"SHOAL_ENDPOINT=" + endpoint}, o.env...), o.stdin, args...)
}

// runEnv runs the binary with exactly env (and PATH): no SHOAL_ENDPOINT.
func runEnv(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	return runIn(t, bin, env, "", args...)
}

func runIn(t *testing.T, bin string, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

func (r result) must(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// g. The README's quickstart, through the built binary, in its documented
// syntax (flags after positional arguments).
func TestQuickstartThroughBinary(t *testing.T) {
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()

	runWith(t, bin, ep, runOpts{env: []string{"NVIDIA_API_KEY=nvapi-e2e-secret"}},
		"provider", "create", "nvidia", "--type", "nvidia", "--credential-from-env", "NVIDIA_API_KEY").must(t, 0, "provider create")
	r := run(t, bin, ep, "sandbox", "create", "agent", "--provider", "nvidia", "--wait").must(t, 0, "sandbox create --wait")
	if !strings.Contains(r.stdout, "READY") {
		t.Fatalf("sandbox create --wait printed no READY: %s", r.stdout)
	}
	r = run(t, bin, ep, "sandbox", "exec", "agent", "--", "env").must(t, 0, "sandbox exec env")
	if !strings.Contains(r.stdout, "NVIDIA_API_KEY=nvapi-e2e-secret") {
		t.Fatalf("exec env does not show the credential:\n%s", r.stdout)
	}
	run(t, bin, ep, "sandbox", "exec", "agent", "--", "sh", "-c", "exit 7").must(t, 7, "exec exit code")
	r = run(t, bin, ep, "sandbox", "logs", "agent").must(t, 0, "sandbox logs")
	if !strings.Contains(r.stdout, "sandbox ready") {
		t.Fatalf("logs miss the image's greeting: %q", r.stdout)
	}
	// Credentials never come back through the API.
	r = run(t, bin, ep, "-o", "json", "provider", "get", "nvidia").must(t, 0, "provider get")
	if strings.Contains(r.stdout, "nvapi-e2e-secret") || !strings.Contains(r.stdout, "NVIDIA_API_KEY") {
		t.Fatalf("provider get leaked or lost the credential: %s", r.stdout)
	}
	r = run(t, bin, ep, "provider", "delete", "nvidia").must(t, cli.ExitPrecondition, "provider delete while attached")
	if !strings.Contains(r.stderr, "attached to sandbox(es): agent") {
		t.Fatalf("provider delete error does not name the sandbox: %s", r.stderr)
	}
	run(t, bin, ep, "sandbox", "label", "agent", "team=ml").must(t, 0, "sandbox label")
	r = run(t, bin, ep, "sandbox", "list", "--selector", "team=ml").must(t, 0, "sandbox list --selector")
	if !strings.Contains(r.stdout, "agent") {
		t.Fatalf("selector list misses agent: %s", r.stdout)
	}
	run(t, bin, ep, "sandbox", "delete", "agent", "--wait").must(t, 0, "sandbox delete --wait")
	run(t, bin, ep, "provider", "delete", "nvidia").must(t, 0, "provider delete")
	run(t, bin, ep, "sandbox", "get", "agent").must(t, cli.ExitNotFound, "get deleted sandbox")
	run(t, bin, ep, "sandbox", "delete", "agent", "--ignore-not-found").must(t, 0, "delete --ignore-not-found")
	run(t, bin, ep, "provider", "delete", "nvidia", "--ignore-not-found").must(t, 0, "provider delete --ignore-not-found")
}

// h. Bad input through the CLI: exit 2, a message naming the field, nothing stored.
func TestBadInputThroughBinary(t *testing.T) {
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"sandbox", "create", "Bad_Name"}, "sandbox.meta.name"},
		{[]string{"sandbox", "create", strings.Repeat("a", 64)}, "sandbox.meta.name"},
		{[]string{"sandbox", "create", "ok", "--env", "1BAD=x"}, "sandbox.spec.env"},
		{[]string{"sandbox", "create", "ok", "--env", "BIG=" + strings.Repeat("x", 8<<10+1)}, "sandbox.spec.env[BIG]"},
		{[]string{"sandbox", "create", "ok", "--label", "bad key=x"}, "sandbox.meta.labels"},
		{[]string{"sandbox", "create", "ok", "--provider", "UPPER"}, "sandbox.spec.providers[0]"},
		{[]string{"provider", "create", "p", "--type", "nvidia", "--credential", "bad-key=x"}, "provider.credentials"},
		{[]string{"sandbox", "list", "--selector", "=x"}, "label_selector"},
		{[]string{"sandbox", "create", "ok", "--cpu-millis", "288230376151712204"}, "sandbox.spec.resources.cpu_millis"},
		{[]string{"sandbox", "create", "ok", "--memory-mib", "8796093022208"}, "--memory-mib"},
		{[]string{"sandbox", "create", "ok", "--image", "UPPER/Case:!!"}, "sandbox.spec.image"},
		{[]string{"sandbox", "create", "ok", "--image", "../../etc/passwd"}, "sandbox.spec.image"},
		{[]string{"provider", "create", "p", "--type", "nvidia", "--config", "k\x01ey=v"}, "provider.config"},
		{[]string{"sandbox", "label", "ok", "a=b", "--if-version", "-3"}, "resource_version"},
		{[]string{"sandbox", "create", "ok", "--", "echo", "\xff"}, "not valid UTF-8"},
	} {
		r := run(t, bin, ep, tc.args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.field) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s", tc.args, r.code, r.stderr, cli.ExitUsage, tc.field)
		}
	}
	// Too many providers.
	args := []string{"sandbox", "create", "ok"}
	for i := range apiserver.MaxProviders + 1 {
		args = append(args, "--provider", "p"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if r := run(t, bin, ep, args...); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "sandbox.spec.providers") {
		t.Errorf("%d providers: exit %d, %q", apiserver.MaxProviders+1, r.code, r.stderr)
	}
	ctx := context.Background()
	sbs, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
	if err != nil || len(sbs.Items) != 0 {
		t.Fatalf("bad input stored sandboxes: %v %v", sbs, err)
	}
	ps, err := n.Client.ListProviders(ctx, &shoalv1.ListProvidersRequest{})
	if err != nil || len(ps.Items) != 0 {
		t.Fatalf("bad input stored providers: %v %v", ps, err)
	}
	// Unreachable endpoint: exit 5 and a hint.
	r := run(t, bin, "127.0.0.1:1", "sandbox", "list")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "shoal node start") {
		t.Fatalf("unreachable endpoint: exit %d %q", r.code, r.stderr)
	}
}

// With no Docker engine reachable, node start says so in one line and exits.
func TestNodeStartWithoutDocker(t *testing.T) {
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	r := run(t, bin, "", "node", "start", "--data-dir", cfg.DataDir, "--listen", "127.0.0.1:0",
		"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer,
		"--docker-host", "unix://"+t.TempDir()+"/no-docker.sock")
	if r.code != cli.ExitError {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, cli.ExitError, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "no Docker engine is reachable") || !strings.Contains(lines[0], "Start the Docker engine") {
		t.Fatalf("want one clear line saying what to do, got:\n%s", r.stderr)
	}
}

// SIGTERM shuts a node down gracefully (exit 0), and a restart on the same
// data dir keeps the state.
func TestNodeSignalAndRestartKeepsState(t *testing.T) {
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, cfg.ID) })
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	start := func() *exec.Cmd {
		return startBinaryNode(t, exec.Command(bin, "node", "start", "--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api,
			"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer, "--log-level", "warn"),
			func() result { return run(t, bin, api, "provider", "list") })
	}
	stop := func(cmd *exec.Cmd) { stopBinaryNode(t, cmd) }
	n := start()
	run(t, bin, api, "provider", "create", "keep", "--type", "github", "--credential", "GITHUB_TOKEN=x").must(t, 0, "provider create")
	stop(n)
	n = start()
	run(t, bin, api, "provider", "get", "keep").must(t, 0, "provider survives restart")
	stop(n)
}

// startBinaryNode starts a `shoal node start` process and waits until
// serving (a CLI call) exits 0; the process is killed at the test's end
// if it still runs.
func startBinaryNode(t *testing.T, cmd *exec.Cmd, serving func() result) *exec.Cmd {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	testenv.Eventually(t, time.Minute, "node serving", func() (bool, error) {
		r := serving()
		return r.code == 0, fmt.Errorf("exit %d: %s", r.code, r.stderr)
	})
	return cmd
}

// stopBinaryNode sends SIGTERM and requires a clean exit within a minute.
func stopBinaryNode(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("node exit after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("node did not stop within a minute of SIGTERM")
	}
}

// `sandbox watch --since` a revision the cluster never reached fails after
// the store's short wait (OUT_OF_RANGE, exit 1, saying to list again)
// instead of waiting for ever.
func TestWatchFromAFutureRevisionThroughBinary(t *testing.T) {
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	start := time.Now()
	r := run(t, bin, n.Addr(), "sandbox", "watch", "--since", "99999999999").must(t, cli.ExitError, "watch from a future revision")
	if !strings.Contains(r.stderr, "OutOfRange") || !strings.Contains(r.stderr, "99999999999 is ahead of the store") || !strings.Contains(r.stderr, "list again") {
		t.Fatalf("watch from a future revision: stderr %s", r.stderr)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the watch took %s to fail", took)
	}
}
