package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/internal/testenv"
)

// Stop, start and restart through the built binary, on a sandbox of node
// 1 driven through node 0 (separate engines: only node 1 can touch its
// container). A stopped sandbox's container stays exited through a cut
// off (self-fencing) and a kill and restart of its owner: nothing but a
// start runs it again.
func TestStopStartThroughANonOwner(t *testing.T) {
	t.Parallel()
	c := lossCluster(t)
	bin := testenv.Binary(t)
	front := c.Addr(0)
	run(t, bin, front, "sandbox", "create", "st", "--node", c.ID(1), "--wait").must(t, 0, "create on node 1")
	uid := getSandbox(t, bin, front, "st").Meta.Uid
	run(t, bin, front, "sandbox", "exec", "st", "--", "sh", "-c", "echo kept > /root/f").must(t, 0, "write a file")

	r := run(t, bin, front, "sandbox", "stop", "st", "--wait", "--grace", "3s").must(t, 0, "stop --wait")
	if r.stdout != "sandbox st stopped (exit code 0)\n" {
		t.Fatalf("stop --wait printed %q", r.stdout)
	}
	if st := containerOf(t, c, 1, uid); st != "exited" {
		t.Fatalf("after stop the container on node 1 is %q, want exited", st)
	}
	r = run(t, bin, front, "sandbox", "exec", "st", "--", "true").must(t, cli.ExitPrecondition, "exec into a stopped sandbox")
	if !strings.Contains(r.stderr, "STOPPED") || !strings.Contains(r.stderr, "sandbox start st") {
		t.Fatalf("exec into a stopped sandbox said %q", r.stderr)
	}
	// Flags before the name; a second stop is a no-op that succeeds.
	run(t, bin, front, "sandbox", "stop", "--wait", "st").must(t, 0, "stop of a stopped sandbox")
	if r := run(t, bin, front, "sandbox", "stop", "-t", "5", "st").must(t, 0, "stop -t 5 of a stopped sandbox"); r.stdout != "sandbox st already stopped\n" {
		t.Fatalf("stop of a stopped sandbox printed %q", r.stdout)
	}

	// Self-fencing and node loss never start it.
	c.CutOff(1)
	testenv.Eventually(t, nodeTTL+15*time.Second, "the cut-off owner's sandbox UNKNOWN", func() bool {
		return getSandbox(t, bin, front, "st").Status.Phase == shoalv1.SandboxPhase_UNKNOWN
	})
	c.Heal(1)
	c.Kill(1)
	c.Restart(1)
	c.WaitReady(1)
	testenv.Eventually(t, 30*time.Second, "the sandbox STOPPED again once its owner is back", func() bool {
		return getSandbox(t, bin, front, "st").Status.Phase == shoalv1.SandboxPhase_STOPPED
	})
	if st := containerOf(t, c, 1, uid); st != "exited" {
		t.Fatalf("after a cut off and a restart of its owner the stopped container is %q", st)
	}

	r = run(t, bin, front, "sandbox", "start", "st", "--wait").must(t, 0, "start --wait")
	if r.stdout != "sandbox st started\n" || containerOf(t, c, 1, uid) != "running" {
		t.Fatalf("start --wait printed %q; container %q", r.stdout, containerOf(t, c, 1, uid))
	}
	r = run(t, bin, front, "sandbox", "exec", "st", "--", "cat", "/root/f").must(t, 0, "read the file after start")
	if r.stdout != "kept\n" {
		t.Fatalf("the file after stop and start: %q", r.stdout)
	}
	if r := run(t, bin, front, "sandbox", "start", "st").must(t, 0, "start of a READY sandbox"); r.stdout != "sandbox st already running\n" {
		t.Fatalf("start of a READY sandbox printed %q", r.stdout)
	}

	r = run(t, bin, front, "-o", "json", "sandbox", "restart", "st", "--wait", "-t", "0").must(t, 0, "restart --wait")
	var sb struct {
		Spec struct {
			RunState string `json:"run_state"`
		}
		Status struct {
			Phase                 string
			ObservedRunGeneration string `json:"observed_run_generation"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil || sb.Status.Phase != "READY" || sb.Spec.RunState != "RUN_STATE_RUNNING" || sb.Status.ObservedRunGeneration != "4" {
		t.Fatalf("restart -o json: %v\n%s", err, r.stdout)
	}

	// A rotation reaches the running sandbox's files at once and its
	// environment at the next start (a new container from its files).
	run(t, bin, front, "provider", "create", "rot", "--type", "generic", "--credential", "ROT_KEY=old-value").must(t, 0, "provider create")
	run(t, bin, front, "sandbox", "attach", "st", "rot").must(t, 0, "attach")
	run(t, bin, front, "sandbox", "restart", "st", "--wait").must(t, 0, "restart after an attach")
	run(t, bin, front, "provider", "update", "rot", "--credential", "ROT_KEY=new-value").must(t, 0, "rotate")
	testenv.Eventually(t, 10*time.Second, "the rotated value in the file", func() bool {
		return run(t, bin, front, "sandbox", "exec", "st", "--", "cat", "/run/shoal/providers/rot/ROT_KEY").stdout == "new-value"
	})
	if r := run(t, bin, front, "sandbox", "exec", "st", "--", "sh", "-c", `echo "$ROT_KEY"`).must(t, 0, "env before the restart"); r.stdout != "old-value\n" {
		t.Fatalf("env before the restart: %q", r.stdout)
	}
	run(t, bin, front, "sandbox", "restart", "st", "--wait").must(t, 0, "restart after the rotation")
	if r := run(t, bin, front, "sandbox", "exec", "st", "--", "sh", "-c", `echo "$ROT_KEY"; cat /root/f`).must(t, 0, "env after the restart"); r.stdout != "new-value\nkept\n" {
		t.Fatalf("env and file after the restart: %q", r.stdout)
	}
	if st := containerOf(t, c, 1, uid); st != "running" {
		t.Fatalf("after a refreshing restart the sandbox's container on node 1 is %q", st)
	}

	// A command that exits nonzero: start --wait exits 1 naming its code.
	run(t, bin, front, "sandbox", "create", "job", "--node", c.ID(1), "--wait", "--", "sh", "-c", "exit 3").must(t, cli.ExitError, "create of a failing job")
	r = run(t, bin, front, "sandbox", "start", "job", "--wait").must(t, cli.ExitError, "start of a failing job")
	if !strings.Contains(r.stderr, "code 3") {
		t.Fatalf("start --wait of a failing job said %q", r.stderr)
	}

	// Bad input: usage errors exit 2 naming the flag; a missing sandbox 3.
	for _, args := range [][]string{
		{"sandbox", "stop", "st", "--grace", "-1s"},
		{"sandbox", "stop", "st", "--grace", "2h"},
		{"sandbox", "stop", "st", "-t", "ten"},
		{"sandbox", "stop", "st", "job", "--if-version", "3"},
		{"sandbox", "start"},
	} {
		if r := run(t, bin, front, args...); r.code != 2 {
			t.Errorf("%v: exit %d, stderr %q; want 2", args, r.code, r.stderr)
		}
	}
	run(t, bin, front, "sandbox", "stop", "nope").must(t, cli.ExitNotFound, "stop of a missing sandbox")
	run(t, bin, front, "sandbox", "start", "st", "--if-version", "1").must(t, cli.ExitPrecondition, "start at a stale version")

	// Delete works from STOPPED, through the non-owner.
	run(t, bin, front, "sandbox", "stop", "st", "--wait", "--grace", "0").must(t, 0, "stop before delete")
	run(t, bin, front, "sandbox", "delete", "st", "job", "--wait").must(t, 0, "delete stopped sandboxes")
	if st := containerOf(t, c, 1, uid); st != "" {
		t.Fatalf("a deleted stopped sandbox left its container (%s)", st)
	}
}
