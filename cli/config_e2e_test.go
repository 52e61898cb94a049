package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"shoal/internal/testenv"
	"shoal/node"
)

// Contexts through the built binary, in the documented syntax: a context
// supplies the endpoint and workspace, a flag overrides it, --context picks
// another for one command; the file is 0600; a config file whose
// current-context is gone refuses calls (naming it) but still lets
// `config use-context` repair it. (Hollow node: no engine needed.)
func TestConfigContextsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	file := filepath.Join(t.TempDir(), "shoal", "config.yaml")
	// No SHOAL_ENDPOINT: the context must supply the endpoint.
	env := []string{"SHOAL_CONFIG=" + file}
	shoal := func(args ...string) result { t.Helper(); return runEnv(t, bin, env, args...) }

	shoal("config", "set-context", "dev", "--endpoint", n.Addr(), "--workspace", "team-a", "--use").must(t, 0, "set-context dev --use")
	shoal("config", "set-context", "nowhere", "--endpoint", "127.0.0.1:1").must(t, 0, "set-context nowhere")
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v, want mode 0600", st, err)
	}
	r := shoal("config", "get-contexts").must(t, 0, "get-contexts")
	if !strings.Contains(r.stdout, "*") || !strings.Contains(r.stdout, "dev") || !strings.Contains(r.stdout, "team-a") || !strings.Contains(r.stdout, "nowhere") {
		t.Fatalf("get-contexts:\n%s", r.stdout)
	}

	// The current context's endpoint and workspace are used.
	shoal("sandbox", "create", "in-a").must(t, 0, "sandbox create through the context")
	if r := shoal("sandbox", "get", "in-a", "-o", "json").must(t, 0, "sandbox get"); !strings.Contains(r.stdout, `"team-a"`) {
		t.Fatalf("the sandbox is not in the context's workspace:\n%s", r.stdout)
	}
	// A flag overrides the context's field; --context picks another one.
	shoal("sandbox", "get", "in-a", "--workspace", "default").must(t, 3, "sandbox get in another workspace")
	if r := shoal("sandbox", "list", "--context", "nowhere"); r.code != 5 || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("--context nowhere: exit %d, stderr %s; want 5 naming 127.0.0.1:1", r.code, r.stderr)
	}
	shoal("sandbox", "list", "--context", "gone").must(t, 2, "--context naming no context")

	// The current context deleted by hand: calls refuse naming the file
	// and the context; the config commands still run and repair it.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(data), "current-context: dev", "current-context: gone", 1)
	if broken == string(data) {
		t.Fatalf("no current-context line in:\n%s", data)
	}
	if err := os.WriteFile(file, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := shoal("sandbox", "list"); r.code != 2 || !strings.Contains(r.stderr, `current-context "gone"`) {
		t.Fatalf("with a broken current-context: exit %d, stderr %s", r.code, r.stderr)
	}
	shoal("config", "get-contexts").must(t, 0, "get-contexts with a broken current-context")
	shoal("config", "use-context", "dev").must(t, 0, "use-context repairs it")
	if r := shoal("sandbox", "list").must(t, 0, "sandbox list after the repair"); !strings.Contains(r.stdout, "in-a") {
		t.Fatalf("list after the repair:\n%s", r.stdout)
	}
	shoal("config", "delete-context", "nowhere").must(t, 0, "delete-context")
	shoal("config", "use-context", "nowhere").must(t, 3, "use-context of a deleted context")
}
