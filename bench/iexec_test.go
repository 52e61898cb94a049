package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/creack/pty"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// ptySession is a command run on a pseudo-terminal whose output the
// benchmark reads as it comes.
type ptySession struct {
	cmd  *exec.Cmd
	ptmx *os.File
	out  chan []byte
	buf  []byte
}

func startSession(b *testing.B, cmd *exec.Cmd) *ptySession {
	b.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		b.Fatal(err)
	}
	s := &ptySession{cmd: cmd, ptmx: ptmx, out: make(chan []byte, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.out)
		for {
			p := make([]byte, 4096)
			n, err := ptmx.Read(p)
			if n > 0 {
				s.out <- p[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		ptmx.Close()
		for range s.out { // until the reader has returned
		}
		<-done
	})
	return s
}

// until reads until want has arrived (after what was read before), or
// fails the benchmark after d.
func (s *ptySession) until(b *testing.B, want []byte, d time.Duration) {
	b.Helper()
	deadline := time.After(d)
	for !bytes.Contains(s.buf, want) {
		select {
		case p, ok := <-s.out:
			if !ok {
				b.Fatalf("%v: the terminal closed; it showed %q", s.cmd.Args, s.buf)
			}
			s.buf = append(s.buf, p...)
		case <-deadline:
			b.Fatalf("%v: %q did not arrive within %s; the terminal showed %q", s.cmd.Args, want, d, s.buf)
		}
	}
	s.buf = s.buf[bytes.Index(s.buf, want)+len(want):]
}

// keystroke types one byte and returns the time until its echo arrives.
func (s *ptySession) keystroke(b *testing.B, c byte) time.Duration {
	b.Helper()
	t0 := time.Now()
	if _, err := s.ptmx.Write([]byte{c}); err != nil {
		b.Fatal(err)
	}
	s.until(b, []byte{c}, 10*time.Second)
	return time.Since(t0)
}

// The keystroke echo of an interactive exec (issue 23, figures): a byte
// typed into `shoal sandbox exec -it` through a node that does not own the
// sandbox, until the container's terminal echoes it back, against the
// same through `docker exec -it` on the owner's own engine. Both run
// `cat >/dev/null` on a terminal, so the echo is the container's terminal
// driver's alone. A third session goes through the owner itself, to tell
// the forwarding hop from the rest. Keystrokes rotate between the
// sessions; the figures are the medians (p50) and the 90th percentiles
// of b.N keystrokes each; the goal is non-owner/docker ≤ 1.5 at p50.
func BenchmarkKeystrokeEchoVsDocker(b *testing.B) {
	testenv.RequireDocker(b)
	bin := testenv.Binary(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("skipping: no docker CLI")
	}
	c := testenv.StartCluster(b, testenv.ClusterConfig{Nodes: 2, LeaseTTL: benchLeaseTTL})
	if !c.SeparateEngines() {
		b.Log("the nodes share one Docker engine here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := c.Client(0).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "keys"}, Spec: &shoalv1.SandboxSpec{Node: c.ID(1)}}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		b.Fatalf("create: %v %v", err, sb.GetStatus().GetPhase())
	}
	shoalVia := func(node int) *exec.Cmd {
		cmd := exec.Command(bin, "sandbox", "exec", "-it", "keys", "--", "sh", "-c", "echo go; exec cat >/dev/null")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "SHOAL_ENDPOINT=" + c.Addr(node), "TERM=xterm"}
		return cmd
	}
	dockerCmd := exec.Command(dockerBin, "exec", "-it", sb.Status.ContainerId, "sh", "-c", "echo go; exec cat >/dev/null")
	dockerCmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "DOCKER_HOST=" + c.Engine(1).Host, "TERM=xterm"}
	// Through the non-owner, through the owner, and docker on the owner's
	// engine.
	sessions := []*ptySession{startSession(b, shoalVia(0)), startSession(b, shoalVia(1)), startSession(b, dockerCmd)}
	for _, s := range sessions {
		s.until(b, []byte("go"), 30*time.Second)
	}
	const line = 64 // keystrokes, then Enter, so that no line grows long
	times := make([][]time.Duration, len(sessions))
	b.ResetTimer()
	for i := range b.N {
		for j := range sessions {
			k := (i + j) % len(sessions) // rotate which goes first
			s := sessions[k]
			times[k] = append(times[k], s.keystroke(b, byte('a'+i%26)))
			if i%line == line-1 {
				if _, err := s.ptmx.Write([]byte("\r")); err != nil {
					b.Fatal(err)
				}
				s.until(b, []byte("\n"), 10*time.Second)
			}
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p int) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, len(s)*p/100)]
	}
	for k, name := range []string{"nonowner", "owner", "docker"} {
		b.ReportMetric(float64(pct(times[k], 50).Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(pct(times[k], 90).Microseconds())/1000, name+"-p90-ms")
	}
	b.ReportMetric(float64(pct(times[0], 50))/float64(pct(times[2], 50)), "p50-nonowner/docker")
	b.ReportMetric(float64(pct(times[1], 50))/float64(pct(times[2], 50)), "p50-owner/docker")
}
