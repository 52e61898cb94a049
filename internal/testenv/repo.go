package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// RepoRoot is the root of this module's checkout: the nearest directory at
// or above the working directory (go test runs a package's tests in its
// directory) whose go.mod declares module shoal. It does not use the
// source file paths compiled into the test, which -trimpath (make test)
// removes.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isShoalModule(mod) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod of module shoal at or above the working directory")
		}
		dir = parent
	}
}

func isShoalModule(mod []byte) bool {
	for _, line := range bytes.Split(mod, []byte("\n")) {
		if f := strings.Fields(string(line)); len(f) == 2 && f[0] == "module" {
			return f[1] == "shoal"
		}
	}
	return false
}

// Deps lists the packages pkg links, directly or through another (go list
// -deps), or skips when there is no go tool to ask: the dependency rules
// of the binaries are tests on this list.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: no go tool on PATH to list the packages %s links", pkg)
	}
	cmd := exec.Command(goTool, "list", "-deps", pkg)
	cmd.Dir = RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// LinksNone fails t for each of pkgs that links, directly or through
// another, a package that forbidden matches; rule says why they must not
// (it ends the error).
func LinksNone(t testing.TB, forbidden *regexp.Regexp, rule string, pkgs ...string) {
	t.Helper()
	for _, pkg := range pkgs {
		var found []string
		for _, p := range Deps(t, pkg) {
			if forbidden.MatchString(p) {
				found = append(found, p)
			}
		}
		if len(found) > 0 {
			t.Errorf("%s links %s (%s)", pkg, strings.Join(found, " "), rule)
		}
	}
}

// LinksAll fails t for each of want that pkg does not link: the other
// side of a LinksNone rule, which shows its pattern matches something.
func LinksAll(t testing.TB, pkg string, want ...string) {
	t.Helper()
	linked := map[string]bool{}
	for _, p := range Deps(t, pkg) {
		linked[p] = true
	}
	for _, w := range want {
		if !linked[w] {
			t.Errorf("%s does not link %s", pkg, w)
		}
	}
}
