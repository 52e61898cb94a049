package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal/encryption"
	"shoal/internal/testenv"
	"shoal/node"
)

// The security commands through the built binary, in their documented
// syntax: `certs init`, `admin new-encryption-key` (twice: k1, then k2
// current), a TLS node with a key ring and --trace-file (hollow runtime),
// a context with the admin's certificate (`config set-context`, `config
// view`), `shoal --trace` (its trace id is in the node's trace file, with
// the store's spans, and the credential nowhere in it), the wrong-CA hint,
// and `admin rotate-encryption-key` before and after the node gains k2.
func TestSecurityCommandsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	dir := t.TempDir()
	pki, other, keys := filepath.Join(dir, "pki"), filepath.Join(dir, "other"), filepath.Join(dir, "keys.yaml")
	traces, conf := filepath.Join(dir, "traces.jsonl"), filepath.Join(dir, "config.yaml")
	env := []string{"SHOAL_CONFIG=" + conf}
	shoal := func(args ...string) result { t.Helper(); return runEnv(t, bin, env, args...) }
	const secret = "nvapi-through-the-binary-93c1"

	shoal("certs", "init", "--dir", pki, "--nodes", cfg.ID).must(t, 0, "certs init")
	shoal("certs", "init", "--dir", other, "--nodes", cfg.ID).must(t, 0, "certs init of another CA")
	if r := shoal("admin", "new-encryption-key", "--file", keys, "--name", "k1").must(t, 0, "new-encryption-key k1"); !strings.Contains(r.stdout, `key "k1", now current`) {
		t.Fatalf("new-encryption-key k1: %s", r.stdout)
	}
	if st, err := os.Stat(keys); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", st, err)
	}

	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	start := func() *exec.Cmd {
		t.Helper()
		return startBinaryNode(t, exec.Command(bin, "node", "start", "--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api, "--runtime", "hollow",
			"--etcd-listen-client", strings.Replace(cfg.EtcdListenClient, "http://", "https://", 1),
			"--etcd-listen-peer", strings.Replace(cfg.EtcdListenPeer, "http://", "https://", 1),
			"--tls-cert", filepath.Join(pki, cfg.ID+".crt"), "--tls-key", filepath.Join(pki, cfg.ID+".key"), "--tls-ca", filepath.Join(pki, "ca.crt"),
			"--encryption-key-file", keys, "--trace-file", traces, "--log-level", "warn"),
			func() result { return shoal("provider", "list") })
	}
	stop := func(cmd *exec.Cmd) { t.Helper(); stopBinaryNode(t, cmd) }

	shoal("config", "set-context", "sec", "--endpoint", api, "--tls-cert", filepath.Join(pki, "admin.crt"),
		"--tls-key", filepath.Join(pki, "admin.key"), "--tls-ca", filepath.Join(pki, "ca.crt"), "--use").must(t, 0, "set-context sec")
	view := shoal("config", "view").must(t, 0, "config view")
	for _, want := range []string{"# " + conf, "current-context: sec", api, filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key")} {
		if !strings.Contains(view.stdout, want) {
			t.Fatalf("config view lacks %q:\n%s", want, view.stdout)
		}
	}
	if strings.Contains(view.stdout, "PRIVATE KEY") {
		t.Fatalf("config view prints a key:\n%s", view.stdout)
	}
	if r := shoal("config", "view", "-o", "json").must(t, 0, "config view -o json"); !strings.Contains(r.stdout, `"sec"`) {
		t.Fatalf("config view -o json:\n%s", r.stdout)
	}

	n := start()
	r := shoal("--trace", "provider", "create", "nv", "--type", "nvidia", "--credential", "NVIDIA_API_KEY="+secret).must(t, 0, "--trace provider create")
	m := regexp.MustCompile(`trace id: ([0-9a-f]{32})`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("--trace printed no trace id:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	traceID := m[1]
	if r := shoal("provider", "list", "--tls-ca", filepath.Join(other, "ca.crt")); r.code == 0 || !strings.Contains(r.stderr, "--tls-ca is not the cluster's CA") {
		t.Fatalf("another CA: exit %d, stderr %s; want the wrong-CA hint", r.code, r.stderr)
	}
	if r := shoal("admin", "rotate-encryption-key").must(t, 0, "rotate under k1"); !strings.Contains(r.stdout, "key k1: 0 providers re-encrypted, 1 already under it, 0 failed") {
		t.Fatalf("rotate under k1: %s", r.stdout)
	}
	stop(n)

	// The trace file: the command's trace, continued on the node down to
	// the store; the credential in no span.
	data, err := os.ReadFile(traces)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(traces); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("trace file: %v %v, want mode 0600", st, err)
	}
	var inTrace []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, traceID) {
			if name := regexp.MustCompile(`"Name":"([^"]+)"`).FindStringSubmatch(line); name != nil {
				inTrace = append(inTrace, name[1])
			}
		}
	}
	joined := strings.Join(inTrace, ",")
	if !strings.Contains(joined, "CreateProvider") || !strings.Contains(joined, "store.update") {
		t.Fatalf("spans of trace %s in the trace file: %v; want the CreateProvider call and its store.update", traceID, inTrace)
	}
	if strings.Contains(string(data), secret) {
		t.Fatal("the trace file holds the credential")
	}

	// k2 made current; the node restarts with it and the rotation moves
	// the provider to k2; again, it has nothing left to do.
	if r := shoal("admin", "new-encryption-key", "--file", keys, "--name", "k2").must(t, 0, "new-encryption-key k2"); !strings.Contains(r.stdout, `key "k2", now current`) {
		t.Fatalf("new-encryption-key k2: %s", r.stdout)
	}
	n = start()
	defer stop(n)
	if r := shoal("admin", "rotate-encryption-key").must(t, 0, "rotate to k2"); !strings.Contains(r.stdout, "key k2: 1 providers re-encrypted, 0 already under it, 0 failed") {
		t.Fatalf("rotate to k2: %s", r.stdout)
	}
	if r := shoal("admin", "rotate-encryption-key", "-o", "json").must(t, 0, "rotate again"); !strings.Contains(r.stdout, `"current": 1`) && !strings.Contains(r.stdout, `"current":1`) {
		t.Fatalf("rotate again: %s", r.stdout)
	}
	if r := shoal("provider", "get", "nv", "-o", "json").must(t, 0, "provider get"); strings.Contains(r.stdout, secret) {
		t.Fatalf("provider get shows the credential: %s", r.stdout)
	}
}

// A rotation over a corrupt provider record names it (its key, and how to
// delete it) among the skipped, exits 1, and re-encrypts the others.
func TestRotationNamesCorruptRecords(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	k1, err := encryption.NewKeyFile(nil, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, k1, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.EncryptionKeyFile = keys
	n := testenv.StartNode(t, cfg)
	shoal := func(args ...string) result { t.Helper(); return run(t, bin, n.Addr(), args...) }
	shoal("provider", "create", "good", "--type", "generic", "--credential", "TOKEN=t-good").must(t, 0, "provider create")
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	key := n.Store().ProviderKey("default", "rotten")
	if _, err := raw.Put(context.Background(), key, "\x0a\xff\xff\xff\xff garbage"); err != nil {
		t.Fatal(err)
	}
	r := shoal("admin", "rotate-encryption-key").must(t, 1, "rotate over a corrupt record")
	if !strings.Contains(r.stdout, "1 already under it, 0 failed, 1 corrupt skipped") {
		t.Fatalf("rotate: stdout %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "skipped: ") || !strings.Contains(r.stderr, key) || !strings.Contains(r.stderr, "shoal provider delete rotten") {
		t.Fatalf("rotate: stderr %s; want the skipped record's key and how to delete it", r.stderr)
	}
	if r := shoal("admin", "rotate-encryption-key", "-o", "json").must(t, 0, "rotate -o json"); !strings.Contains(r.stdout, key) {
		t.Fatalf("rotate -o json: %s; want the skipped record", r.stdout)
	}
	shoal("provider", "delete", "rotten").must(t, 0, "delete the corrupt record")
	if r := shoal("admin", "rotate-encryption-key").must(t, 0, "rotate without it"); strings.Contains(r.stdout, "skipped") {
		t.Fatalf("rotate without the corrupt record: %s", r.stdout)
	}
}
