package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeShoal writes an executable at path that answers --version as line.
func fakeShoal(t *testing.T, path, line string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho '"+line+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// findShoal's order: --shoal-binary, the shoal next to shoal-lab, shoal on
// PATH; each found binary must say it is shoal.
func TestFindShoalOrder(t *testing.T) {
	labDir, pathDir, flagDir := t.TempDir(), t.TempDir(), t.TempDir()
	self := filepath.Join(labDir, "shoal-lab")
	fakeShoal(t, self, "shoal-lab version test")
	fakeShoal(t, filepath.Join(pathDir, "shoal"), "shoal version on-path")
	fakeShoal(t, filepath.Join(flagDir, "my-shoal"), "shoal version flag")
	for _, dir := range []string{labDir, pathDir, flagDir} {
		fakeShoal(t, filepath.Join(dir, "shoal-node"), "shoal version node")
	}
	t.Setenv("PATH", pathDir)

	check := func(what, flag, want string) {
		t.Helper()
		got, err := findShoal(flag, self)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", what, got, err, want)
		}
	}
	check("only on PATH", "", filepath.Join(pathDir, "shoal"))
	fakeShoal(t, filepath.Join(labDir, "shoal"), "shoal version next")
	check("next to shoal-lab and on PATH", "", filepath.Join(labDir, "shoal"))
	check("--shoal-binary", filepath.Join(flagDir, "my-shoal"), filepath.Join(flagDir, "my-shoal"))

	// Relative --shoal-binary: made absolute (the hosts need that).
	t.Chdir(flagDir)
	check("relative --shoal-binary", "my-shoal", filepath.Join(flagDir, "my-shoal"))

	// A shoal without shoal-node beside it is refused, naming shoal-node.
	os.Remove(filepath.Join(flagDir, "shoal-node"))
	if _, err := findShoal(filepath.Join(flagDir, "my-shoal"), self); err == nil || !strings.Contains(err.Error(), "no shoal-node beside "+filepath.Join(flagDir, "my-shoal")) {
		t.Errorf("a shoal without shoal-node: %v", err)
	}

	// A shoal next to shoal-lab that is not shoal is refused, not skipped.
	fakeShoal(t, filepath.Join(labDir, "shoal"), "something else 1.0")
	if _, err := findShoal("", self); err == nil || !strings.Contains(err.Error(), "is not a shoal binary") {
		t.Errorf("a non-shoal next to shoal-lab: %v", err)
	}
	// Neither: the error names where it looked.
	os.Remove(filepath.Join(labDir, "shoal"))
	t.Setenv("PATH", t.TempDir())
	if _, err := findShoal("", self); err == nil || !strings.Contains(err.Error(), filepath.Join(labDir, "shoal")) {
		t.Errorf("no shoal anywhere: %v", err)
	}
}
