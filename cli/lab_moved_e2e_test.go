package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// chaos and bench moved to shoal-lab: shoal answers them, with any flags,
// with a usage error that says where they went, and no longer lists them.
func TestLabCommandsMovedThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	for _, tc := range []struct {
		args []string
		cmd  string
	}{
		{[]string{"chaos", "run", "--scenario", "all", "--duration", "5m", "--report", "reports/chaos"}, "chaos"},
		{[]string{"chaos", "soak", "--cluster", "3"}, "chaos"},
		{[]string{"chaos", "--help"}, "chaos"},
		{[]string{"chaos"}, "chaos"},
		{[]string{"--endpoint", "127.0.0.1:1", "bench", "cluster", "--hollow-nodes", "100"}, "bench"},
	} {
		what := strings.Join(tc.args, " ")
		r := run(t, bin, "", tc.args...).must(t, cli.ExitUsage, what)
		for _, want := range []string{"`shoal " + tc.cmd + "` moved to `shoal-lab " + tc.cmd + "`", "make build builds bin/shoal-lab"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", what, want, r.stderr)
			}
		}
	}
	r := run(t, bin, "", "--help").must(t, 0, "shoal --help")
	if listed := regexp.MustCompile(`(?m)^\s+(chaos|bench)\s`).FindString(r.stdout); listed != "" {
		t.Errorf("shoal --help lists %q:\n%s", listed, r.stdout)
	}
	if !strings.Contains(r.stdout, "shoal-lab") {
		t.Errorf("shoal --help does not name shoal-lab:\n%s", r.stdout)
	}
}
