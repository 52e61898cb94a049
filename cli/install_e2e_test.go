package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"shoal/internal/testenv"
)

// repoRoot is the checkout this package's tests run in (go test runs them
// in cli/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// makeCmd runs make in the repository root with extra environment and
// returns its stdout; it fails the test on a nonzero exit. An outer make
// (make test) must not leak its flags or jobserver into this one.
func makeCmd(t *testing.T, env []string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("skipping: make not found (%v)", err)
	}
	start := time.Now()
	out, err := makeOutput(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("make %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

// runMake is makeCmd for a caller without a test of its own (makeBuild).
func runMake(env []string, args ...string) error {
	_, err := makeOutput(env, args...)
	return err
}

// makeOutput runs make as makeCmd says and returns its stdout, or an error
// with both outputs.
func makeOutput(env []string, args ...string) (string, error) {
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	cmd.Dir = root
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "PREFIX", "VERSION", "BIN", "NODE_BIN", "LAB_BIN":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// requireExecutable fails unless path is an executable file.
func requireExecutable(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("not installed: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("%s: mode %v, want an executable file", path, fi.Mode())
	}
}

// made is one `make build` into a directory of its own, shared by the
// tests of make build and make install (three static binaries are linked
// once, not once per test).
var made struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain removes makeBuild's directory once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if made.dir != "" {
		os.RemoveAll(made.dir)
	}
	os.Exit(code)
}

// makeBuild runs `make -s build` once per test process into a directory of
// its own and returns the directory (shoal, shoal-node, shoal-lab).
func makeBuild(t *testing.T) string {
	t.Helper()
	made.once.Do(func() {
		dir, err := os.MkdirTemp("", "shoal-make-build-")
		if err != nil {
			made.err = err
			return
		}
		made.dir = dir // outlives this test: TestMain removes it
		made.err = runMake(nil, "-s", "build", "BIN="+filepath.Join(dir, "shoal"), "LAB_BIN="+filepath.Join(dir, "shoal-lab"))
	})
	if made.err != nil {
		t.Fatal(made.err)
	}
	return made.dir
}

// make install puts the three binaries, under their own names, into
// $(PREFIX)/bin when PREFIX is set and into $(go env GOPATH)/bin
// otherwise, and they run from there. It builds them first (make -n shows
// it); the installs here reuse makeBuild's binaries (-o build: make takes
// build as done), so that the install recipe itself runs for real.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := makeBuild(t)
	build := []string{"-o", "build", "BIN=" + filepath.Join(dir, "shoal"), "LAB_BIN=" + filepath.Join(dir, "shoal-lab")}
	if out := makeCmd(t, nil, "-n", "install"); !strings.Contains(out, "-o bin/shoal-node ./cmd/shoal-node") || !strings.Contains(out, "-o bin/shoal ./cmd/shoal") {
		t.Errorf("make install does not build first:\n%s", out)
	}

	prefix := filepath.Join(tmp, "prefix")
	makeCmd(t, nil, append([]string{"-s", "install", "PREFIX=" + prefix}, build...)...)
	// shoal-node is shoal's tree with the server in it: it calls itself
	// shoal.
	for name, says := range map[string]string{"shoal": "shoal", "shoal-node": "shoal", "shoal-lab": "shoal-lab"} {
		bin := filepath.Join(prefix, "bin", name)
		requireExecutable(t, bin)
		r := runEnv(t, bin, nil, "version").must(t, 0, name+" version")
		if !strings.HasPrefix(r.stdout, says+" ") {
			t.Errorf("%s version printed %q, want %q first", bin, r.stdout, says+" ")
		}
	}

	// No PREFIX: GOPATH's bin. GOPATH moved to a temporary directory for
	// the test; the module cache stays where it is, so nothing is fetched.
	gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	gopath := filepath.Join(tmp, "gopath")
	makeCmd(t, []string{"GOPATH=" + gopath, "GOMODCACHE=" + strings.TrimSpace(string(gomodcache))}, append([]string{"-s", "install"}, build...)...)
	for _, name := range []string{"shoal", "shoal-node", "shoal-lab"} {
		requireExecutable(t, filepath.Join(gopath, "bin", name))
	}
}

// startHollowNode starts `bin node start` with the hollow runtime (no
// Docker engine needed) and returns it, its id and API address once it
// serves.
func startHollowNode(t *testing.T, bin string) (*exec.Cmd, string, string) {
	t.Helper()
	cfg := testenv.NodeConfig(t)
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	node := exec.Command(bin, "node", "start", "--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api, "--runtime", "hollow",
		"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer, "--log-level", "warn")
	startBinaryNode(t, node, func() result { return run(t, bin, api, "node", "get", cfg.ID) })
	return node, cfg.ID, api
}

// gitVersion is what make build stamps: git describe, "dev" outside git.
func gitVersion(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

// make build stamps git describe into the binaries; `shoal version` and
// --version print it, a node started from the binary registers it, and
// the node image is built with the same version. Outside git it is "dev".
func TestMakeBuildStampsVersion(t *testing.T) {
	t.Parallel()
	tmp := makeBuild(t)
	bin, lab := filepath.Join(tmp, "shoal"), filepath.Join(tmp, "shoal-lab")
	want := gitVersion(t)
	if want == "dev" {
		t.Logf("not a git checkout: the version is %q", want)
	}
	if r := runEnv(t, bin, nil, "version").must(t, 0, "shoal version"); r.stdout != "shoal "+want+"\n" {
		t.Errorf("shoal version printed %q, want %q", r.stdout, "shoal "+want+"\n")
	}
	if r := runEnv(t, bin, nil, "--version").must(t, 0, "shoal --version"); r.stdout != "shoal version "+want+"\n" {
		t.Errorf("shoal --version printed %q, want %q", r.stdout, "shoal version "+want+"\n")
	}
	if r := runEnv(t, lab, nil, "version").must(t, 0, "shoal-lab version"); r.stdout != "shoal-lab "+want+"\n" {
		t.Errorf("shoal-lab version printed %q, want %q", r.stdout, "shoal-lab "+want+"\n")
	}

	if r := runEnv(t, filepath.Join(tmp, "shoal-node"), nil, "version").must(t, 0, "shoal-node version"); r.stdout != "shoal "+want+"\n" {
		t.Errorf("shoal-node version printed %q, want %q", r.stdout, "shoal "+want+"\n")
	}

	// What the node registers is the same stamp (shoal node start runs the
	// shoal-node make build put beside shoal). The hollow runtime needs
	// no Docker engine.
	node, id, api := startHollowNode(t, bin)
	r := run(t, bin, api, "-o", "json", "node", "get", id).must(t, 0, "node get")
	var n struct{ Version string }
	if err := json.Unmarshal([]byte(r.stdout), &n); err != nil {
		t.Fatalf("node get -o json: %v\n%s", err, r.stdout)
	}
	if n.Version != want {
		t.Errorf("node %s registered version %q, want %q", id, n.Version, want)
	}
	stopBinaryNode(t, node)

	// The node image gets the same version (make -n: print, build nothing).
	if out := makeCmd(t, nil, "-n", "node-image"); !strings.Contains(out, "VERSION='"+want+"' ") {
		t.Errorf("make node-image does not hand build.sh VERSION=%q:\n%s", want, out)
	}
	// Outside git (no repository found) the stamp is "dev".
	if out := makeCmd(t, []string{"GIT_DIR=" + filepath.Join(tmp, "no-git")}, "-n", "build"); !strings.Contains(out, "-X shoal/cli.Version=dev'") {
		t.Errorf("outside git, make build does not stamp dev:\n%s", out)
	}
}
