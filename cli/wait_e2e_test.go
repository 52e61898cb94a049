package cli_test

import (
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// `sandbox create --wait` exits by the phase the wait ends in (README,
// exit codes): STOPPED with exit code 0 is success, STOPPED with another
// code is 1, ERROR (Docker refused the command) is 4; the error line names
// the phase, and the code.
func TestCreateWaitExitByPhaseThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	ep := testenv.StartNode(t, testenv.NodeConfig(t)).Addr()

	for _, tc := range []struct {
		name string
		cmd  []string
		code int
		// what stdout (the printed sandbox) and stderr (the error) say
		phase, stderr string
	}{
		{"zero", []string{"sh", "-c", "exit 0"}, 0, "STOPPED", ""},
		{"three", []string{"sh", "-c", "exit 3"}, cli.ExitError, "STOPPED", "sandbox three is STOPPED: its command exited with code 3"},
		{"missing", []string{"/no/such/executable"}, cli.ExitPrecondition, "ERROR", "sandbox missing is in phase ERROR: "},
	} {
		args := append([]string{"sandbox", "create", tc.name, "--wait", "--"}, tc.cmd...)
		r := run(t, bin, ep, args...).must(t, tc.code, strings.Join(args, " "))
		if !strings.Contains(r.stdout, tc.phase) {
			t.Errorf("%s: the printed sandbox is not %s:\n%s", tc.name, tc.phase, r.stdout)
		}
		if tc.stderr == "" && strings.Contains(r.stderr, "Error") {
			t.Errorf("%s: exit 0 with an error: %q", tc.name, r.stderr)
		}
		if !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%s: stderr lacks %q:\n%s", tc.name, tc.stderr, r.stderr)
		}
	}
}
