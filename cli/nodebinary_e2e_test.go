package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"shoal/internal/testenv"
)

// copyFile copies an executable into dir under name.
func copyFile(t *testing.T, src, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// shoal links none of the server: `shoal node start` and `shoal cluster
// snapshot restore` run the shoal-node beside it (symlinks resolved), else
// on PATH, with the command line unchanged. So their help, flags, exit
// codes and completion are shoal-node's own, byte for byte; without a
// shoal-node the error says where it looked and how to get one.
func TestNodeCommandsRunShoalNode(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	node := filepath.Join(filepath.Dir(bin), "shoal-node")

	for _, args := range [][]string{
		{"node", "start", "--help"},
		{"cluster", "snapshot", "restore", "--help"},
		{"node", "--help"},
		{"cluster", "snapshot", "--help"},
		// A bad flag is shoal-node's usage error, exit 2.
		{"node", "start", "--no-such-flag"},
		{"cluster", "snapshot", "restore"},
		// Completion of the flags comes from shoal-node's tree.
		{"node", "start", "--e", "--generate-bash-completion"},
	} {
		got, want := runEnv(t, bin, nil, args...), runEnv(t, node, nil, args...)
		if got != want {
			t.Errorf("shoal %s: %+v\nshoal-node %s: %+v", strings.Join(args, " "), got, strings.Join(args, " "), want)
		}
	}
	if r := runEnv(t, bin, nil, "node", "start", "--help").must(t, 0, "node start --help"); !strings.Contains(r.stdout, "--etcd-initial-cluster") {
		t.Errorf("shoal node start --help does not list the node's flags:\n%s", r.stdout)
	}
	if r := runEnv(t, bin, nil, "node", "start", "--n", "--generate-bash-completion"); !strings.Contains(r.stdout, "--node-id") {
		t.Errorf("completion of shoal node start lists no --node-id:\n%+v", r)
	}

	// A link to shoal elsewhere finds shoal-node beside the real file.
	linkDir := t.TempDir()
	link := filepath.Join(linkDir, "shoal")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	runEnv(t, link, nil, "node", "start", "--help").must(t, 0, "node start --help through a symlink")

	// shoal alone: not beside it, not on PATH (runEnv's PATH is
	// /usr/bin:/bin). Exit 1, naming what is missing and where it looked.
	alone := copyFile(t, bin, t.TempDir(), "shoal")
	for _, args := range [][]string{{"node", "start"}, {"cluster", "snapshot", "restore", "snap.db", "--data-dir", t.TempDir()}} {
		r := runEnv(t, alone, nil, args...).must(t, 1, "shoal "+strings.Join(args, " ")+" without shoal-node")
		for _, want := range []string{"shoal-node", filepath.Join(filepath.Dir(alone), "shoal-node"), "make build"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("shoal %s without shoal-node: stderr lacks %q:\n%s", strings.Join(args, " "), want, r.stderr)
			}
		}
	}
	// On PATH it is found.
	pathDir := t.TempDir()
	copyFile(t, node, pathDir, "shoal-node")
	r := runEnv(t, alone, []string{"PATH=" + pathDir}, "node", "start", "--help").must(t, 0, "node start --help with shoal-node on PATH")
	if !strings.Contains(r.stdout, "--etcd-initial-cluster") {
		t.Errorf("shoal-node on PATH: node start --help printed:\n%s", r.stdout)
	}
	// Every other command is shoal's own: it needs no shoal-node.
	runEnv(t, alone, nil, "sandbox", "list", "--help").must(t, 0, "sandbox list --help without shoal-node")
}
