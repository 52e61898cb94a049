package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/node"
)

// upstream is a fake internet: an HTTP server on every host address
// saying who it is.
func upstream(t *testing.T, name string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", name)
	}), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// sbExec runs a command in a sandbox: its stdout, stderr and exit code.
func sbExec(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) (string, string, int32) {
	t.Helper()
	out, errs, code, err := trySbExec(ctx, c, name, cmd...)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	return out, errs, code
}

// trySbExec is sbExec that returns the call's failure.
func trySbExec(ctx context.Context, c shoalv1.ShoalClient, name string, cmd ...string) (string, string, int32, error) {
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd})
	if err != nil {
		return "", "", 0, err
	}
	var out, errb strings.Builder
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return "", "", 0, fmt.Errorf("no exit code")
		}
		if err != nil {
			return "", "", 0, err
		}
		switch r.GetStream() {
		case "stdout":
			out.Write(r.GetData())
		case "stderr":
			errb.Write(r.GetData())
		}
		if r.GetExited() {
			return out.String(), errb.String(), r.GetExitCode(), nil
		}
	}
}

// banner is a TCP server (no HTTP) that greets every connection with a
// line: what a CONNECT tunnel (TLS, SSH, any TCP) reaches.
func banner(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "banner from tcp upstream\n")
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

func rule(host string, ports ...int) *shoalv1.EgressRule {
	r := &shoalv1.EgressRule{Host: host}
	for _, p := range ports {
		r.Ports = append(r.Ports, uint32(p))
	}
	return r
}

// A sandbox with egress rules reaches what they allow through its node's
// proxy, and nothing else: not another port, not directly (no route), not
// the node's own API, not a name that resolves to loopback; it has no
// capability to change its network. A policy change is in force for the
// next connection once the write is acknowledged; audit mode admits and
// records; a stop and start brings a new sidecar; a delete removes it.
func TestEgressEnforcedOnTheOwner(t *testing.T) {
	cli := testenv.RequireDocker(t)
	if _, err := cli.ImageInspect(context.Background(), docker.DefaultEgressImage); err != nil {
		t.Fatalf("the egress sidecar image %s is missing (run `make image`): %v", docker.DefaultEgressImage, err)
	}
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.MetricsListen = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 4*time.Minute)
	c := n.Client
	host := testenv.HostAddr(t).String()
	allowed, other, tcp := upstream(t, "allowed"), upstream(t, "other"), banner(t)
	url := func(port int) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/" }
	wget := func(args ...string) (string, string, int32) {
		return sbExec(t, ctx, c, "eg", append([]string{"timeout", "10", "wget", "-q", "-O", "-"}, args...)...)
	}

	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "eg"},
		Spec: &shoalv1.SandboxSpec{Egress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(host, allowed, tcp), rule("localhost", allowed)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_READY || sb.GetSpec().GetEgress().GetVersion() != 1 || sb.GetStatus().GetEgressAppliedVersion() != 1 {
		t.Fatalf("create --wait returned phase %s, policy version %d, applied %d; want READY, 1, 1 (the wait ends once the node enforces it)",
			sb.GetStatus().GetPhase(), sb.GetSpec().GetEgress().GetVersion(), sb.GetStatus().GetEgressAppliedVersion())
	}

	if out, errs, code := wget(url(allowed)); code != 0 || out != "hello from allowed\n" {
		t.Fatalf("wget of the allowed destination: exit %d, %q, %q; want the upstream's answer", code, out, errs)
	}
	// Any TCP through a CONNECT tunnel (as TLS and SSH go).
	tunnel := net.JoinHostPort(host, strconv.Itoa(tcp))
	if out, _, code := sbExec(t, ctx, c, "eg", "sh", "-c", fmt.Sprintf("printf 'CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' | timeout 10 nc 127.0.0.1 3128", tunnel, tunnel)); !strings.Contains(out, " 200 ") || !strings.Contains(out, "banner from tcp upstream") {
		t.Errorf("a CONNECT tunnel to an allowed TCP port: exit %d, %q; want 200 and the upstream's banner", code, out)
	}
	refused := func(what string, args ...string) {
		t.Helper()
		if out, errs, code := wget(args...); code == 0 {
			t.Errorf("%s: admitted (%q); want it refused", what, out)
		} else if strings.Contains(out, "hello") {
			t.Errorf("%s: exit %d but the upstream answered: %q", what, code, out)
		} else {
			t.Logf("%s: refused as it must be (exit %d: %s)", what, code, strings.TrimSpace(errs))
		}
	}
	refused("another port of the same host", url(other))
	refused("the node's API through the proxy", "http://"+net.JoinHostPort(host, portOf(t, n.Addr()))+"/")
	refused("the allowed destination without the proxy (no route)", "-Y", "off", url(allowed))
	refused("the node's API without the proxy", "-Y", "off", "http://"+net.JoinHostPort(host, portOf(t, n.Addr()))+"/")
	// Every port of the node (API, etcd client and peer, metrics), named
	// by loopback or by a host address, through the proxy: refused (no
	// rule names them, and the SSRF check refuses the node's own
	// addresses). Without the proxy there is no route at all (above).
	for _, u := range []string{"http://" + n.Addr(), cfg.EtcdListenClient, cfg.EtcdListenPeer, "http://" + cfg.MetricsListen} {
		port := portOf(t, strings.TrimPrefix(u, "http://"))
		for _, target := range []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort(host, port)} {
			out, _, code := sbExec(t, ctx, c, "eg", "sh", "-c", fmt.Sprintf("printf 'CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' | timeout 10 nc 127.0.0.1 3128", target, target))
			if !strings.Contains(out, " 403 ") {
				t.Errorf("the node's port %s through the proxy: exit %d, %q; want a 403", target, code, out)
			}
		}
	}
	// localhost is allowed by name, but it resolves to loopback: the SSRF
	// check refuses it (the client must name the proxy explicitly, since
	// no_proxy covers localhost).
	if out, _, code := sbExec(t, ctx, c, "eg", "sh", "-c", fmt.Sprintf("printf 'GET http://localhost:%d/ HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' | nc -w 5 127.0.0.1 3128", allowed)); !strings.Contains(out, "403") || strings.Contains(out, "hello") {
		t.Errorf("a name resolving to 127.0.0.1 through the proxy: exit %d, %q; want a 403", code, out)
	}
	// No capability to change the network (spoofing another sandbox's
	// address, or leaving loopback): NET_ADMIN (bit 12) and NET_RAW (13)
	// are not in its effective set.
	capOut, _, _ := sbExec(t, ctx, c, "eg", "grep", "CapEff", "/proc/self/status")
	if f := strings.Fields(capOut); len(f) != 2 {
		t.Errorf("CapEff line %q", capOut)
	} else if caps, err := strconv.ParseUint(f[1], 16, 64); err != nil || caps&(1<<12|1<<13) != 0 {
		t.Errorf("sandbox capabilities %q: want neither NET_ADMIN nor NET_RAW", capOut)
	}

	// A change is in force for the next connection once acknowledged.
	upd, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "eg", AddEgressRules: []*shoalv1.EgressRule{rule(host, other)},
		RemoveEgressRules: []*shoalv1.EgressRule{rule(host, allowed, tcp)}})
	if err != nil {
		t.Fatal(err)
	}
	if v := upd.GetSpec().GetEgress().GetVersion(); v != 2 {
		t.Fatalf("policy version after the change: %d, want 2", v)
	}
	if out, errs, code := wget(url(other)); code != 0 || out != "hello from other\n" {
		t.Errorf("right after the write: newly allowed port: exit %d, %q, %q", code, out, errs)
	}
	refused("right after the write: the removed rule", url(allowed))
	testenv.Eventually(t, 30*time.Second, "the node reports policy version 2 applied", func() bool {
		sb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "eg"})
		return err == nil && sb.GetStatus().GetEgressAppliedVersion() == 2
	})

	// Audit mode admits what enforce refuses, and records it.
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "eg", EgressMode: shoalv1.EgressMode_EGRESS_MODE_AUDIT}); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := wget(url(allowed)); code != 0 || out != "hello from allowed\n" {
		t.Errorf("audit mode: exit %d, %q, %q; want it admitted", code, out, errs)
	}
	testenv.Eventually(t, 30*time.Second, "EgressRefused and EgressAudited events", func() error {
		evs, err := c.ListEvents(ctx, &shoalv1.ListEventsRequest{Sandbox: "eg"})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, e := range evs.GetItems() {
			seen[e.GetReason()] = true
		}
		if !seen["EgressRefused"] || !seen["EgressAudited"] || !seen["EgressApplied"] {
			return fmt.Errorf("reasons seen: %v", seen)
		}
		return nil
	})

	// Counted, and written to the audit log.
	fams := scrape(t, cfg.MetricsListen)
	for _, d := range []string{"admit", "refuse", "audit"} {
		if v := value(fams, "shoal_egress_connections_total", map[string]string{"decision": d, "sandbox": "default/eg"}); v < 1 {
			t.Errorf("shoal_egress_connections_total{decision=%q,sandbox=\"default/eg\"} = %v; want at least 1", d, v)
		}
	}
	testenv.Eventually(t, 30*time.Second, "egress lines in the audit log", func() error {
		b, err := os.ReadFile(cfg.AuditLog)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `"method":"egress/refuse"`) || !strings.Contains(string(b), `"method":"egress/audit"`) {
			return fmt.Errorf("no egress/refuse and egress/audit lines yet")
		}
		return nil
	})

	// Stopped and started: a new network namespace, a new sidecar.
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "eg", EgressMode: shoalv1.EgressMode_EGRESS_MODE_ENFORCE}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "eg", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "eg", Wait: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "egress after a stop and a start", func() error {
		out, errs, code := wget(url(other))
		if code != 0 || out != "hello from other\n" {
			return fmt.Errorf("exit %d, %q, %q", code, out, errs)
		}
		return nil
	})

	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "eg", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerInspect(ctx, "shoal-egress-"+sb.GetMeta().GetUid()); !cerrdefs.IsNotFound(err) {
		t.Errorf("the sidecar after the delete: %v; want it gone", err)
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A node killed hard takes its proxy with it: its sandboxes' sidecars
// relay to a socket nothing serves, so nothing gets out while it is down
// (no open egress is left behind); restarted on the same data dir, it
// serves them again. Its --egress-dir is deeper than a socket address
// holds.
func TestEgressClosedWhileTheNodeIsDown(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	ctx := ctxT(t, 4*time.Minute)
	cfg := testenv.NodeConfig(t)
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, cfg.ID) })
	args := []string{"--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api,
		"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer,
		"--resync", "300ms", "--lease-ttl", "2s",
		// Deeper than a unix socket's address holds: the node listens
		// through the directory's descriptor.
		"--egress-dir", filepath.Join(t.TempDir(), strings.Repeat("e", 80))}
	node1 := startBinaryNode(t, bin, args...)
	c := dial(t, api)
	testenv.Eventually(t, time.Minute, "node serving", func() (bool, error) {
		_, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
		return err == nil, err
	})
	host := testenv.HostAddr(t).String()
	port := upstream(t, "allowed")
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "eg"},
		Spec: &shoalv1.SandboxSpec{Egress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(host, port)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	wget := []string{"timeout", "10", "wget", "-q", "-O", "-", url}
	if out, errs, code := sbExec(t, ctx, c, "eg", wget...); code != 0 || out != "hello from allowed\n" {
		t.Fatalf("before the kill: exit %d, %q, %q", code, out, errs)
	}
	if err := node1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node1.Wait()
	// Straight on the engine: the node is down.
	out, err := exec.CommandContext(ctx, "docker", "exec", sb.GetStatus().GetContainerId(), wget[0], wget[1], wget[2], wget[3], wget[4], wget[5], wget[6]).CombinedOutput()
	if err == nil || strings.Contains(string(out), "hello") {
		t.Fatalf("with the node down: %v, %q; want no way out", err, out)
	}
	t.Logf("with the node down: %v: %s", err, strings.TrimSpace(string(out)))
	if _, err := dc.ContainerInspect(ctx, "shoal-egress-"+sb.GetMeta().GetUid()); err != nil {
		t.Fatalf("the sidecar should outlive the node process: %v", err)
	}

	startBinaryNode(t, bin, args...)
	testenv.Eventually(t, 2*time.Minute, "egress served again after the restart", func() error {
		out, errs, code, err := trySbExec(ctx, c, "eg", wget...)
		if err != nil {
			return err
		}
		if code != 0 || out != "hello from allowed\n" {
			return fmt.Errorf("exit %d, %q, %q", code, out, errs)
		}
		return nil
	})
}

// On a node whose sandboxes get the bridge network, a sandbox created
// with rules still has no network but the proxy; one created without and
// given rules later keeps its bridge, and the node says it cannot confine
// it (condition Egress False), never that it enforces the policy.
func TestEgressOnABridgeNode(t *testing.T) {
	dc := testenv.RequireDocker(t)
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.SandboxNetwork = docker.NetworkBridge
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	host := testenv.HostAddr(t).String()
	port := upstream(t, "allowed")
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "confined"},
		Spec: &shoalv1.SandboxSpec{Egress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(host, port)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := dc.ContainerInspect(ctx, sb.GetStatus().GetContainerId())
	if err != nil || !ci.HostConfig.NetworkMode.IsNone() {
		t.Fatalf("a sandbox created with rules on a bridge node: network %v (%v); want none", ci.HostConfig.NetworkMode, err)
	}
	if out, errs, code := sbExec(t, ctx, c, "confined", "timeout", "10", "wget", "-q", "-O", "-", url); code != 0 || out != "hello from allowed\n" {
		t.Fatalf("through the proxy: exit %d, %q, %q", code, out, errs)
	}
	if _, _, code := sbExec(t, ctx, c, "confined", "timeout", "10", "wget", "-q", "-Y", "off", "-O", "-", url); code == 0 {
		t.Errorf("a sandbox created with rules reached its upstream without the proxy")
	}

	if _, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "bridged"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "bridged", AddEgressRules: []*shoalv1.EgressRule{rule(host, port)}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the node says it cannot confine a bridged sandbox", func() error {
		sb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "bridged"})
		if err != nil {
			return err
		}
		if sb.GetStatus().GetEgressAppliedVersion() != 0 {
			return fmt.Errorf("applied version %d: a bridged sandbox must not be reported enforced", sb.GetStatus().GetEgressAppliedVersion())
		}
		for _, cd := range sb.GetStatus().GetConditions() {
			if cd.Type == "Egress" && cd.Status == "False" && cd.Reason == "NotEnforced" && strings.Contains(cd.Message, "create the sandbox again") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", sb.GetStatus().GetConditions())
	})
}

// A hollow node with --hollow-egress enforces egress as a Docker node
// does, the sidecars simulated: a sandbox with rules gets its socket,
// served by the node's proxy, with the version applied in its status; a
// request through it reaches an allowed upstream, a policy change is in
// force for the next one, and a sandbox with no rules has no socket left
// (the simulated sidecars: hollow's TestEgressSidecars). Without
// --runtime hollow the flag is refused.
func TestEgressOnAHollowNode(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime, cfg.HollowEgress = node.RuntimeHollow, true
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	c := n.Client
	host := testenv.HostAddr(t).String()
	allowed := upstream(t, "allowed")
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(allowed)) + "/"

	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "eg"},
		Spec: &shoalv1.SandboxSpec{Egress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(host, allowed)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	applied := func(v int64) {
		t.Helper()
		testenv.Eventually(t, time.Minute, fmt.Sprintf("policy version %d applied", v), func() (bool, error) {
			got, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "eg"})
			return err == nil && got.GetStatus().GetEgressAppliedVersion() == v, err
		})
	}
	applied(sb.Spec.Egress.Version)
	socket := filepath.Join(cfg.DataDir, "egress", sb.Meta.Uid, "s")
	if code, body := testenv.SocketGet(t, socket, url); code != http.StatusOK || body != "hello from allowed\n" {
		t.Fatalf("an allowed request on the hollow node: %d %q", code, body)
	}

	set := func(rules ...*shoalv1.EgressRule) int64 {
		t.Helper()
		up, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "eg", SetEgress: &shoalv1.EgressPolicy{Rules: rules}})
		if err != nil {
			t.Fatal(err)
		}
		return up.Spec.Egress.Version
	}
	// The next connection after the write's response meets the new
	// policy (the proxy reads the record; the agent reports the version).
	v := set(rule(host, allowed+1))
	if code, body := testenv.SocketGet(t, socket, url); code != http.StatusForbidden {
		t.Fatalf("a request right after its rule was replaced: %d %q; want 403", code, body)
	}
	applied(v)

	applied(set())
	if c, err := testenv.DialUnix(socket, time.Second); err == nil {
		c.Close()
		t.Error("the socket still answers once the sandbox has no rules")
	}
	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "eg", Wait: true}); err != nil {
		t.Fatal(err)
	}

	bad := testenv.NodeConfig(t)
	bad.HollowEgress = true
	if _, err := node.New(bad); err == nil || !strings.Contains(err.Error(), "--hollow-egress") {
		t.Fatalf("a Docker node with --hollow-egress: %v; want an error naming the flag", err)
	}
}
