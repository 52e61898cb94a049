package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builds are the binaries built once per test process, by package path.
var (
	buildMu sync.Mutex
	builds  = map[string]*build{}
)

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Binary returns the path of the shoal binary: $SHOAL_BIN (set by
// `make test`), or one built once per test process (static, as `make
// build` builds it). shoal-node, the server that `shoal node start` runs,
// is beside it: make build puts it there, and so does the build here.
func Binary(t testing.TB) string {
	t.Helper()
	return builtBinary(t, "SHOAL_BIN", "shoal", "shoal-node")
}

// LabBinary returns the path of the shoal-lab binary (package lab):
// $SHOAL_LAB_BIN (set by `make test`), or one built once per test process,
// as Binary does. Its commands start the shoal binary: a test gives
// Binary's with --shoal-binary unless it tests where shoal-lab finds it.
func LabBinary(t testing.TB) string {
	t.Helper()
	return builtBinary(t, "SHOAL_LAB_BIN", "shoal-lab")
}

// builtBinary is $env, or ./cmd/name built once, with ./cmd/beside for
// each of beside in the same directory.
func builtBinary(t testing.TB, env, name string, beside ...string) string {
	t.Helper()
	if b := os.Getenv(env); b != "" {
		return b
	}
	buildMu.Lock()
	b, ok := builds[name]
	if !ok {
		b = &build{}
		builds[name] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-bin-")
		if err != nil {
			b.err = err
			return
		}
		root, err := repoRoot()
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, name)
		for _, cmdName := range append([]string{name}, beside...) {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, cmdName), "./cmd/"+cmdName)
			cmd.Dir = root
			// Static, as `make build` makes it: chaos/hosts runs
			// shoal-node in containers built FROM scratch.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.err = &buildError{err, string(out)}
				return
			}
		}
	})
	if b.err != nil {
		t.Fatalf("build %s: %v (set %s to a built one)", name, b.err, env)
	}
	return b.bin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
