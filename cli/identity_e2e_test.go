package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/pki"
)

// startFails runs `shoal node start args...`, which must exit (with an
// error) within a minute: a node that starts instead fails the test then,
// not after runIn's two minutes. It returns the run and how long it took.
func startFails(t *testing.T, bin string, args ...string) (result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"node", "start"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	if ctx.Err() != nil {
		t.Fatalf("node start %v still ran after a minute; want a refusal. stderr:\n%s", args, errb.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("node start %v: %v (exit 0?); stderr:\n%s", args, err, errb.String())
	}
	return result{out.String(), errb.String(), ee.ExitCode()}, took
}

// oneLine requires stderr to be one line holding every want.
func (r result) oneLine(t *testing.T, what string, want ...string) {
	t.Helper()
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 {
		t.Fatalf("%s: want one line, got %d:\n%s", what, len(lines), r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("%s: want %q in:\n%s", what, w, r.stderr)
		}
	}
}

// https turns a test node's plaintext etcd URLs into TLS ones.
func tlsNode(cfg *node.Config, f pki.Files) {
	cfg.TLS = f
	for _, u := range []*string{&cfg.EtcdListenClient, &cfg.EtcdListenPeer} {
		*u = "https://" + strings.TrimPrefix(*u, "http://")
	}
}

func pkiFiles(dir, name string) pki.Files {
	return pki.Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
}

func tlsArgs(f pki.Files) []string {
	return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
}

// A node started on another node's certificate is refused before anything
// starts: one line naming both ids, exit 2, nothing written. (It served,
// Ready, as that other node's holder.)
func TestNodeCertificateMustNameItsNode(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	dir := t.TempDir()
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n2", "n3"}}); err != nil {
		t.Fatal(err)
	}
	r, _ := startFails(t, bin, append([]string{"--node-id", "n3", "--data-dir", cfg.DataDir, "--listen", "127.0.0.1:0", "--runtime", "hollow",
		"--etcd-listen-client", strings.Replace(cfg.EtcdListenClient, "http://", "https://", 1),
		"--etcd-listen-peer", strings.Replace(cfg.EtcdListenPeer, "http://", "https://", 1)},
		tlsArgs(pki.Files{Cert: filepath.Join(dir, "n2.crt"), Key: filepath.Join(dir, "n2.key"), CA: filepath.Join(dir, "ca.crt")})...)...)
	r.must(t, cli.ExitUsage, "n3 on n2's certificate")
	r.oneLine(t, "n3 on n2's certificate", "--tls-cert "+filepath.Join(dir, "n2.crt")+` names node "n2" but --node-id is "n3"`, "--nodes n3")
	if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start wrote its data dir: %v", err)
	}
}

// A node id belongs to the installation (data dir) that registered it.
// With node X NotReady and a sandbox on it: a new data dir under X is
// refused (exit 4, one line saying what to do) and the sandbox is left
// alone; X restarted on its own data dir serves; --replace-node takes X
// over (the log says what happens to its sandboxes), after which the old
// data dir is refused in turn; `shoal node remove X` frees the id for any
// data dir. The nodes are workers of a leader in the test process, all on
// the hollow runtime. (Before: the new data dir's node served as X and put
// X's sandboxes in ERROR while their containers ran on.)
func TestNodeIDBelongsToItsInstallation(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	lcfg := testenv.NodeConfig(t)
	lcfg.Runtime = node.RuntimeHollow
	lcfg.FenceMargin = time.Second
	leader := testenv.StartNode(t, lcfg)
	ep := leader.Addr()
	id := lcfg.ID + "-x"
	dirs := t.TempDir()
	logs := filepath.Join(dirs, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	args := func(dataDir, api string, extra ...string) []string {
		return append([]string{"--node-id", id, "--etcd-endpoints", leader.EtcdEndpoint(), "--data-dir", filepath.Join(dirs, dataDir),
			"--listen", api, "--runtime", "hollow", "--node-ttl", "2s", "--resync", "300ms", "--log-level", "warn"}, extra...)
	}
	starts := 0
	start := func(dataDir string, extra ...string) (*exec.Cmd, string, string) {
		t.Helper()
		api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		starts++
		logPath := filepath.Join(logs, fmt.Sprintf("%d-%s.log", starts, dataDir))
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logf.Close() })
		cmd := exec.Command(bin, append([]string{"node", "start"}, args(dataDir, api, extra...)...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		return startBinaryNode(t, cmd, func() result { return run(t, bin, api, "node", "get", id) }), api, logPath
	}
	refused := func(what, dataDir string, want ...string) {
		t.Helper()
		r, _ := startFails(t, bin, args(dataDir, "127.0.0.1:0")...)
		r.must(t, cli.ExitPrecondition, what)
		r.oneLine(t, what, want...)
	}

	b, apiB, _ := start("b")
	run(t, bin, ep, "sandbox", "create", "kept", "--node", id, "--wait").must(t, 0, "sandbox on "+id)
	stopBinaryNode(t, b)
	if r := run(t, bin, ep, "node", "get", id).must(t, 0, "node get"); !strings.Contains(r.stdout, "NotReady") {
		t.Fatalf("%s after its graceful stop:\n%s", id, r.stdout)
	}

	refused("a new data dir under a NotReady node's id", "c",
		fmt.Sprintf(`node id %q belongs to another installation (NotReady, last at %s`, id, apiB), "shoal node remove "+id, "--replace-node")
	if r := run(t, bin, ep, "sandbox", "get", "kept", "-o", "json").must(t, 0, "sandbox get"); strings.Contains(r.stdout, "ERROR") {
		t.Fatalf("the refused node touched the sandbox:\n%s", r.stdout)
	}

	b, _, _ = start("b") // its own data dir: its id back
	stopBinaryNode(t, b)

	c, apiC, logC := start("c", "--replace-node")
	if r := run(t, bin, ep, "node", "get", id).must(t, 0, "node get"); !strings.Contains(r.stdout, apiC) {
		t.Fatalf("%s after --replace-node does not show the new address %s:\n%s", id, apiC, r.stdout)
	}
	if b, err := os.ReadFile(logC); err != nil || !strings.Contains(string(b), "node id taken over from another installation") {
		t.Fatalf("the replacing node's log does not say what it took over (%v):\n%s", err, b)
	}
	stopBinaryNode(t, c)
	refused("the replaced data dir", "b", "last at "+apiC)

	run(t, bin, ep, "node", "remove", id).must(t, 0, "node remove")
	testenv.Eventually(t, time.Minute, id+" forgotten", func() (bool, error) {
		r := run(t, bin, ep, "node", "get", id)
		return r.code == cli.ExitNotFound, fmt.Errorf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	})
	d, _, _ := start("d")
	stopBinaryNode(t, d)
}

// A worker or a joining node whose CA is not the cluster's fails at once,
// with one line naming the flag and the address and saying which
// certificate was refused (exit 2): before, a worker gave up after its
// dial timeout with "context deadline exceeded", a joining node after
// retrying the x509 error for two minutes.
func TestAnotherCAFailsTheStartAtOnce(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	ours, theirs := t.TempDir(), t.TempDir()
	w, j := cfg.ID+"-w", cfg.ID+"-j"
	if _, err := pki.Init(pki.InitOptions{Dir: ours, Nodes: []string{cfg.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(pki.InitOptions{Dir: theirs, Nodes: []string{w, j}}); err != nil {
		t.Fatal(err)
	}
	tlsNode(&cfg, pkiFiles(ours, cfg.ID))
	n := testenv.StartNode(t, cfg)
	etcd := n.EtcdEndpoint()

	worker := func(f pki.Files) (result, time.Duration) {
		return startFails(t, bin, append([]string{"--node-id", w, "--etcd-endpoints", "https://" + etcd, "--data-dir", filepath.Join(t.TempDir(), "data"),
			"--listen", "127.0.0.1:0", "--runtime", "hollow"}, tlsArgs(f)...)...)
	}
	r, took := worker(pkiFiles(theirs, w))
	r.must(t, cli.ExitUsage, "a worker of another CA")
	r.oneLine(t, "a worker of another CA", "--etcd-endpoints "+etcd+": its certificate is not signed by the CA of --tls-ca", "give --tls-ca the cluster's CA")
	t.Logf("a worker of another CA: refused in %s", took.Round(time.Millisecond))
	// It trusts the cluster's CA, but its certificate is another's: etcd
	// refuses it (after the handshake, with TLS 1.3).
	r, took = worker(pki.Files{Cert: filepath.Join(theirs, w+".crt"), Key: filepath.Join(theirs, w+".key"), CA: filepath.Join(ours, "ca.crt")})
	r.must(t, cli.ExitUsage, "a worker whose certificate is another CA's")
	r.oneLine(t, "a worker whose certificate is another CA's", "--etcd-endpoints "+etcd+": it refused the certificate of --tls-cert")
	t.Logf("a worker whose certificate is another CA's: refused in %s", took.Round(time.Millisecond))

	jc := testenv.NodeConfig(t)
	r, took = startFails(t, bin, append([]string{"--node-id", j, "--join", n.Addr(), "--data-dir", jc.DataDir, "--listen", "127.0.0.1:0", "--runtime", "hollow",
		"--etcd-listen-client", strings.Replace(jc.EtcdListenClient, "http://", "https://", 1),
		"--etcd-listen-peer", strings.Replace(jc.EtcdListenPeer, "http://", "https://", 1)}, tlsArgs(pkiFiles(theirs, j))...)...)
	r.must(t, cli.ExitUsage, "a joining node of another CA")
	r.oneLine(t, "a joining node of another CA", "--join "+n.Addr()+": its certificate is not signed by the CA of --tls-ca")
	t.Logf("a joining node of another CA: refused in %s", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Fatalf("the join took %s to fail; want it at once", took)
	}
}

// A joining node whose --join node is not up yet keeps trying (plain
// unavailability is no certificate error), and joins over TLS once that
// node serves.
func TestTLSJoinWaitsForItsNode(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	cfg.Listen = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	j := cfg.ID + "-j"
	dir := t.TempDir()
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{cfg.ID, j}}); err != nil {
		t.Fatal(err)
	}
	tlsNode(&cfg, pkiFiles(dir, cfg.ID))

	jc := testenv.NodeConfig(t)
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	logPath := filepath.Join(t.TempDir(), "join.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"node", "start", "--node-id", j, "--join", cfg.Listen, "--data-dir", jc.DataDir, "--listen", api, "--runtime", "hollow",
		"--etcd-listen-client", strings.Replace(jc.EtcdListenClient, "http://", "https://", 1),
		"--etcd-listen-peer", strings.Replace(jc.EtcdListenPeer, "http://", "https://", 1)}, tlsArgs(pkiFiles(dir, j))...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Registered before the node's cleanup, so it runs after it: the
	// joined member must outlive the first one's graceful stop, or that
	// stop would wait for a quorum.
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	testenv.Eventually(t, time.Minute, "the joining node retrying", func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the joining node exited (%v) while its --join node was down:\n%s", err, b)
		default:
		}
		b, err := os.ReadFile(logPath)
		return strings.Contains(string(b), "--join: not yet; retrying"), err
	})
	testenv.StartNode(t, cfg)
	admin := tlsArgs(pkiFiles(dir, "admin"))
	testenv.Eventually(t, 2*time.Minute, "the joined node serving", func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the joining node exited (%v):\n%s", err, b)
		default:
		}
		r := run(t, bin, api, append([]string{"node", "get", j, "-o", "json"}, admin...)...)
		return r.code == 0 && strings.Contains(r.stdout, `"ready": true`), fmt.Errorf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	})
}
