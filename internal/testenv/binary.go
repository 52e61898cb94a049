package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Binary returns the path of the shoal binary: $SHOAL_BIN (set by
// `make test`), or one built once per test process (static, as `make
// build` builds it).
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("SHOAL_BIN"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shoal-bin-")
		if err != nil {
			buildErr = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		builtBin = filepath.Join(dir, "shoal")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/shoal")
		cmd.Dir = root
		// Static, as `make build` makes it: chaos/hosts runs it in
		// containers built FROM scratch.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err, string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("build shoal: %v", buildErr)
	}
	return builtBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
