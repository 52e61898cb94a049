package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"shoal/internal/testenv"
)

// ptyClient is the shoal binary run on a real pseudo-terminal, as a user's
// shell runs it: the test types into the terminal and reads what it shows.
type ptyClient struct {
	t        *testing.T
	cmd      *exec.Cmd
	ptmx     *os.File // the terminal's master side: what the test types and reads
	tty      *os.File // its slave side, kept open to read its mode after shoal exits
	mu       sync.Mutex
	out      bytes.Buffer
	copyDone chan struct{}
	exited   chan struct{} // closed when shoal has exited, with exitErr set
	exitErr  error
}

func startPTY(t *testing.T, bin, endpoint string, args ...string) *ptyClient {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SHOAL_ENDPOINT=" + endpoint}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ptyClient{t: t, cmd: cmd, ptmx: ptmx, tty: tty, copyDone: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		p.exitErr = cmd.Wait()
	}()
	go func() {
		defer close(p.copyDone)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		tty.Close()
		ptmx.Close() // ends the copy
		<-p.copyDone
	})
	return p
}

func (p *ptyClient) typ(s string) {
	p.t.Helper()
	if _, err := p.ptmx.WriteString(s); err != nil {
		p.t.Fatalf("type %q: %v", s, err)
	}
}

func (p *ptyClient) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// expect waits until the terminal has shown want after what it showed when
// mark was taken.
func (p *ptyClient) expect(mark int, want string) {
	p.t.Helper()
	testenv.Eventually(p.t, 20*time.Second, "the terminal shows "+want, func() bool {
		return strings.Contains(p.output()[mark:], want)
	})
}

func (p *ptyClient) mark() int { return len(p.output()) }

// wait returns shoal's exit code.
func (p *ptyClient) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
		err := p.exitErr
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		p.t.Fatalf("shoal did not exit; the terminal shows:\n%s", p.output())
		return -1
	}
}

// procs lists the processes in a sandbox whose command line contains sub
// (ps in the container, through a plain exec).
func procs(t *testing.T, bin, ep, name, sub string) []string {
	t.Helper()
	r := run(t, bin, ep, "sandbox", "exec", name, "--", "ps", "-o", "pid,args").must(t, 0, "ps in the sandbox")
	var out []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// An interactive shell through the built binary on a real terminal: the
// shell computes, follows a resize, survives Ctrl-C of its foreground
// command, exits with its code, and the terminal gets its mode back.
// Killing the client kills what it ran in the container.
func TestExecInteractiveTerminalThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()
	run(t, bin, ep, "sandbox", "create", "term", "--wait").must(t, 0, "sandbox create")

	p := startPTY(t, bin, ep, "sandbox", "shell", "term")
	before, err := unix.IoctlGetTermios(int(p.tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	m := p.mark()
	p.typ("echo $((6*7))\r")
	p.expect(m, "42")

	m = p.mark()
	if err := pty.Setsize(p.ptmx, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	// The resize reaches the container's terminal a moment after the
	// SIGWINCH: ask until it shows.
	testenv.Eventually(t, 10*time.Second, "stty size shows the new size", func() bool {
		p.typ("stty size\r")
		return strings.Contains(p.output()[m:], "33 101")
	})

	p.typ("sleep 4242\r")
	testenv.Eventually(t, 10*time.Second, "sleep runs in the sandbox", func() bool { return len(procs(t, bin, ep, "term", "sleep 4242")) > 0 })
	m = p.mark()
	p.typ("\x03")
	p.typ("echo alive$((1+1))\r")
	p.expect(m, "alive2")
	if ps := procs(t, bin, ep, "term", "sleep 4242"); len(ps) > 0 {
		t.Fatalf("Ctrl-C left the sleep running: %q", ps)
	}

	p.typ("exit 3\r")
	if code := p.wait(); code != 3 {
		t.Fatalf("shoal exited %d after `exit 3`, want 3; the terminal shows:\n%s", code, p.output())
	}
	after, err := unix.IoctlGetTermios(int(p.tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Fatalf("the terminal's mode was not restored: before %+v, after %+v", before, after)
	}

	// SIGTERM twice at once: the first ends the call, the second exits at
	// once (130) if the first has not yet; either way the terminal is as
	// it was.
	s := startPTY(t, bin, ep, "sandbox", "shell", "term")
	m = s.mark()
	s.typ("echo up$((3+3))\r")
	s.expect(m, "up6")
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The first may have ended it already (and its wait reaped it).
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	code := s.wait()
	after, err = unix.IoctlGetTermios(int(s.tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Fatalf("two SIGTERMs (exit %d) left the terminal's mode changed: before %+v, after %+v", code, before, after)
	}

	// Killing the client (SIGKILL: nothing of it runs on) kills the shell
	// and what it started, within 2 s of the call's end.
	k := startPTY(t, bin, ep, "sandbox", "exec", "-it", "term", "--", "sh")
	m = k.mark()
	k.typ("echo ready$((2+2))\r")
	k.expect(m, "ready4")
	// A background job (a process group of its own under an interactive
	// shell) must die with the rest: the session is killed.
	k.typ("sleep 4747 &\r")
	k.typ("sleep 4343\r")
	testenv.Eventually(t, 10*time.Second, "sleep runs in the sandbox", func() bool { return len(procs(t, bin, ep, "term", "sleep 4343")) > 0 })
	if err := k.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// gone is when the ps that found none began: the processes had ended
	// by then (a ps through the binary takes a while on a loaded machine,
	// which must not count against the 2 s).
	var gone time.Time
	testenv.Eventually(t, 10*time.Second, "no exec process left in the sandbox", func() bool {
		began := time.Now()
		var left []string // the exec's shell and its sleep
		for _, l := range procs(t, bin, ep, "term", "") {
			if f := strings.Fields(l); strings.Contains(l, "sleep 4343") || strings.Contains(l, "sleep 4747") || (len(f) == 2 && f[1] == "sh") {
				left = append(left, l)
			}
		}
		if len(left) == 0 {
			gone = began
		}
		return len(left) == 0
	})
	if d := gone.Sub(killed); d > 2*time.Second {
		t.Errorf("the exec's processes outlived the client by %s, more than 2 s", d.Round(time.Millisecond))
	}
	t.Logf("the exec's processes were gone at most %s after the client was killed", gone.Sub(killed).Round(time.Millisecond))

	// -t with -i needs a terminal on stdin.
	r := runWith(t, bin, ep, runOpts{stdin: "x"}, "sandbox", "exec", "-it", "term", "--", "sh")
	if r.code != 2 || !strings.Contains(r.stderr, "not a terminal") {
		t.Fatalf("exec -it without a terminal: exit %d, stderr %q", r.code, r.stderr)
	}
}

// stdinSize is what TestExecStdinAndOptionsThroughANonOwner streams: a
// size that keeps the test well under 30 s on a 2-core machine. The
// issue's 1 GiB was run by hand, this constant set to 1 << 30 (README, "For scripts": 24.3 s).
const stdinSize = 256 << 20

// Standard input streamed through a node that does not own the sandbox
// arrives byte for byte, and the exec options reach the owner: workdir,
// env, user, the timeout (124); bad options are refused naming the flag's
// field.
func TestExecStdinAndOptionsThroughANonOwner(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2})
	front := c.Addr(0)
	run(t, bin, front, "sandbox", "create", "far", "--node", c.ID(1), "--wait").must(t, 0, "sandbox create on node 1")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sandbox", "exec", "-i", "far", "--", "sha256sum")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SHOAL_ENDPOINT=" + front}
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), stdinSize), h)
	cmd.Stdin = src
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("exec -i of %d MiB through a non-owner: %v; stderr %q", stdinSize>>20, err, errb.String())
	}
	took := time.Since(start)
	want := hex.EncodeToString(h.Sum(nil))
	if got, _, _ := strings.Cut(out.String(), " "); got != want {
		t.Fatalf("sha256 in the sandbox %q, of what was sent %s", out.String(), want)
	}
	t.Logf("%d MiB of stdin through a non-owner in %s (%.0f MiB/s)", stdinSize>>20, took.Round(time.Millisecond), float64(stdinSize>>20)/took.Seconds())

	r := run(t, bin, front, "sandbox", "exec", "far", "--workdir", "/tmp", "--env", "GREETING=hi there", "--env", "N=2", "--user", "1234:5678",
		"--", "sh", "-c", `echo "$(pwd) $GREETING $N $(id -u):$(id -g)"`).must(t, 0, "exec with options")
	if r.stdout != "/tmp hi there 2 1234:5678\n" {
		t.Fatalf("exec with options printed %q", r.stdout)
	}
	// The same options on the interactive RPC.
	r = runWith(t, bin, front, runOpts{stdin: "piped"}, "sandbox", "exec", "far", "-i", "--workdir", "/tmp", "-e", "N=3", "-u", "42", "--",
		"sh", "-c", `echo "$(cat) $(pwd) $N $(id -u)"`).must(t, 0, "exec -i with options")
	if r.stdout != "piped /tmp 3 42\n" {
		t.Fatalf("exec -i with options printed %q", r.stdout)
	}

	start = time.Now()
	r = run(t, bin, front, "sandbox", "exec", "far", "--timeout", "1s", "--", "sh", "-c", "sleep 4444 & sleep 4545")
	if r.code != 124 || !strings.Contains(r.stderr, "timeout") {
		t.Fatalf("exec past its --timeout: exit %d, stderr %q", r.code, r.stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exec --timeout 1s took %s", d)
	}
	if ps := procs(t, bin, front, "far", "sleep 4"); len(ps) > 0 {
		t.Fatalf("the timeout left processes of the group: %q", ps)
	}
	r = runWith(t, bin, front, runOpts{stdin: "x"}, "sandbox", "exec", "-i", "far", "--timeout", "1s", "--", "sleep", "4646")
	if r.code != 124 {
		t.Fatalf("exec -i past its --timeout: exit %d, stderr %q", r.code, r.stderr)
	}

	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"--env", "PATH=/x"}, "env[PATH]"},
		{[]string{"--env", "SHOAL_EXEC=x"}, "env[SHOAL_EXEC]"},
		{[]string{"--user", "root"}, "user"},
		{[]string{"--workdir", "tmp"}, "workdir"},
		{[]string{"-i", "--user", "bob"}, "start.user"},
	} {
		r := runWith(t, bin, front, runOpts{stdin: "x"}, append(append([]string{"sandbox", "exec", "far"}, tc.args...), "--", "true")...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) {
			t.Errorf("exec %v: exit %d, stderr %q; want 2 naming %s", tc.args, r.code, r.stderr, tc.field)
		}
	}
	// A workdir that does not exist in the sandbox: the state forbids it
	// (exit 4), and the error says workdir, not that sh is missing.
	for _, args := range [][]string{{"--workdir", "/no/such/dir"}, {"-i", "--workdir", "/no/such/dir"}} {
		r := runWith(t, bin, front, runOpts{stdin: "x"}, append(append([]string{"sandbox", "exec", "far"}, args...), "--", "true")...)
		if r.code != 4 || !strings.Contains(r.stderr, "workdir: no such directory") || strings.Contains(r.stderr, "/bin/sh") {
			t.Errorf("exec %v: exit %d, stderr %q; want 4 naming workdir", args, r.code, r.stderr)
		}
	}
	// -w after exec is the workspace, as in every shoal command.
	if r := run(t, bin, front, "sandbox", "exec", "far", "-w", "elsewhere", "--", "true"); r.code != 3 {
		t.Errorf("exec -w elsewhere (a workspace without far): exit %d, stderr %q; want 3 (not found)", r.code, r.stderr)
	}

	// A terminal through the non-owner: input, a resize, the exit code.
	p := startPTY(t, bin, front, "sandbox", "exec", "-it", "far", "--", "sh")
	m := p.mark()
	p.typ("echo $((6*7))\r")
	p.expect(m, "42")
	m = p.mark()
	if err := pty.Setsize(p.ptmx, &pty.Winsize{Rows: 31, Cols: 97}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "stty size through the non-owner shows the new size", func() bool {
		p.typ("stty size\r")
		return strings.Contains(p.output()[m:], "31 97")
	})
	p.typ("exit 5\r")
	if code := p.wait(); code != 5 {
		t.Fatalf("exec -it through a non-owner exited %d after `exit 5`; the terminal shows:\n%s", code, p.output())
	}
}
