package lab_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// placeLab puts a copy of the shoal-lab binary alone in a new directory
// (a hard link where the file system allows): where it looks for shoal
// is then up to the test.
func placeLab(t *testing.T) (dir, lab string) {
	t.Helper()
	dir = t.TempDir()
	lab = filepath.Join(dir, "shoal-lab")
	src := testenv.LabBinary(t)
	if os.Link(src, lab) == nil {
		return dir, lab
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(lab, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, lab
}

// Every command that starts nodes finds the shoal binary next to
// shoal-lab, else on PATH, else says that there is none and what to do;
// --shoal-binary overrides, and is refused when it is not shoal (shoal-lab
// itself would end up in the hosts' image). An input error checked after
// the binary is found (--clients 0) shows that it was found.
func TestShoalBinaryThroughLab(t *testing.T) {
	shoal := testenv.Binary(t)
	dir, lab := placeLab(t)
	cmds := [][]string{
		{"chaos", "run", "--clients", "0"},
		{"chaos", "soak", "--clients", "0"},
		{"bench", "cluster", "--clients", "0"},
	}
	// Neither next to it nor on PATH (/usr/bin:/bin).
	for _, args := range cmds {
		what := "alone: " + strings.Join(args, " ")
		run(t, lab, nil, args...).must(t, cli.ExitUsage, what).
			stderrHas(t, what, "no shoal binary", filepath.Join(dir, "shoal"), "on PATH", "--shoal-binary PATH", "make build")
	}
	// Nodes that --endpoint names need none.
	run(t, lab, nil, "chaos", "run", "--endpoint", "127.0.0.1:1", "--clients", "0").must(t, cli.ExitUsage, "chaos run --endpoint").
		stderrHas(t, "chaos run --endpoint, no shoal binary", "--clients")

	// On PATH.
	onPath := t.TempDir()
	if err := os.Symlink(shoal, filepath.Join(onPath, "shoal")); err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		what := "shoal on PATH: " + strings.Join(args, " ")
		r := run(t, lab, []string{"PATH=" + onPath + ":/usr/bin:/bin"}, args...).must(t, cli.ExitUsage, what)
		r.stderrHas(t, what, "--clients")
	}

	// --shoal-binary: missing, not executable, not shoal, shoal-lab.
	notExec := filepath.Join(t.TempDir(), "shoal")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bin, want string }{
		{filepath.Join(dir, "nope"), "no such file"},
		{notExec, "not an executable file"},
		{"/bin/true", "is not a shoal binary"},
		{lab, "is shoal-lab, not shoal"},
	} {
		for _, args := range cmds {
			what := "--shoal-binary " + tc.bin + ": " + strings.Join(args, " ")
			run(t, lab, nil, append(args, "--shoal-binary", tc.bin)...).must(t, cli.ExitUsage, what).
				stderrHas(t, what, tc.bin, tc.want)
		}
	}

	// Next to it.
	if err := os.Symlink(shoal, filepath.Join(dir, "shoal")); err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		what := "shoal next to it: " + strings.Join(args, " ")
		run(t, lab, nil, args...).must(t, cli.ExitUsage, what).stderrHas(t, what, "--clients")
	}
}

// shoal-lab has shoal's global flags, help layout and version command, and
// only the lab's commands.
func TestLabConventionsThroughBinary(t *testing.T) {
	lab := testenv.LabBinary(t)
	r := run(t, lab, nil, "version").must(t, 0, "shoal-lab version")
	if !strings.HasPrefix(r.stdout, "shoal-lab ") {
		t.Errorf("shoal-lab version printed %q", r.stdout)
	}
	r = run(t, lab, nil, "--help").must(t, 0, "shoal-lab --help")
	for _, want := range []string{"chaos", "bench", "version", "--endpoint", "--output", "--config", "Exit codes: 0 ok, 1 failure, 2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("shoal-lab --help lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, absent := range []string{"sandbox", "provider"} {
		if strings.Contains(r.stdout, absent) {
			t.Errorf("shoal-lab --help lists %q:\n%s", absent, r.stdout)
		}
	}
	// Flags after the command path, and global flags among them, as in
	// shoal; a bad flag is a usage error.
	run(t, lab, nil, "chaos", "run", "--no-such-flag").must(t, cli.ExitUsage, "chaos run --no-such-flag").
		stderrHas(t, "chaos run --no-such-flag", "no-such-flag", "Hint: `shoal-lab chaos run --help`")
	run(t, lab, nil, "chaos", "run", "extra", "--endpoint", "127.0.0.1:1").must(t, cli.ExitUsage, "chaos run extra --endpoint").
		stderrHas(t, "chaos run extra --endpoint", "chaos run takes no arguments")
	// A command of shoal's is unknown here, as an unknown command is to
	// shoal.
	want := run(t, testenv.Binary(t), nil, "nosuch").code
	run(t, lab, nil, "sandbox", "list").must(t, want, "shoal-lab sandbox list").stderrHas(t, "shoal-lab sandbox list", "sandbox")
}
