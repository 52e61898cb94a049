package bench

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// Stop and start where users feel them (issue 23): whole processes, side
// by side against one node and its engine, interleaved so that each sees
// the same machine:
//
//   - `shoal sandbox stop S --wait` vs `docker stop` of another sandbox's
//     container on the same engine (goal: ratio ≤ 1.2);
//   - `shoal sandbox start S --wait` vs `docker start` of it (goal ≤ 1.2).
//
// Both containers run the default image, whose command exits at SIGTERM,
// so neither stop waits out its grace. Each figure is the median wall time
// (start to exit) of -benchtime rounds, a round stopping and starting each
// once; the ratios are of the medians and of the best runs. docker is
// $DOCKER, else docker on PATH, talking to the engine of $DOCKER_HOST.
func BenchmarkStopStartVsDocker(b *testing.B) {
	testenv.RequireDocker(b)
	bin := testenv.Binary(b)
	dockerBin := os.Getenv("DOCKER")
	if dockerBin == "" {
		p, err := exec.LookPath("docker")
		if err != nil {
			b.Skip("skipping: no docker CLI (set DOCKER)")
		}
		dockerBin = p
	}
	n := testenv.StartNode(b, testenv.NodeConfig(b))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ids []string
	for _, name := range []string{"viashoal", "viadocker"} {
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}})
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			b.Fatalf("create %s: %v %v", name, err, sb.GetStatus().GetPhase())
		}
		ids = append(ids, sb.Status.ContainerId)
	}
	shoal := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "SHOAL_ENDPOINT=" + n.Addr()}
		return cmd
	}
	dockerCmd := func(args ...string) *exec.Cmd {
		cmd := exec.Command(dockerBin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "DOCKER_HOST=" + os.Getenv("DOCKER_HOST")}
		return cmd
	}
	cmds := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"shoal-stop", func() *exec.Cmd { return shoal("sandbox", "stop", "viashoal", "--wait") }},
		{"docker-stop", func() *exec.Cmd { return dockerCmd("stop", ids[1]) }},
		{"shoal-start", func() *exec.Cmd { return shoal("sandbox", "start", "viashoal", "--wait") }},
		{"docker-start", func() *exec.Cmd { return dockerCmd("start", ids[1]) }},
	}
	times := make([][]time.Duration, len(cmds))
	b.ResetTimer()
	for range b.N {
		for i, c := range cmds {
			_, d := runTimed(b, c.cmd())
			times[i] = append(times[i], d)
		}
	}
	b.StopTimer()
	// The shoal sandbox went through both and is READY again in the
	// same container.
	sb, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "viashoal"})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY || sb.Status.ContainerId != ids[0] || sb.Status.ObservedRunGeneration != int64(2*b.N) {
		b.Fatalf("after %d stops and starts: %v %v container %s generation %d", b.N, err, sb.GetStatus().GetPhase(), sb.GetStatus().GetContainerId(), sb.GetStatus().GetObservedRunGeneration())
	}
	med, best := map[string]time.Duration{}, map[string]time.Duration{}
	for i, c := range cmds {
		med[c.name], best[c.name] = median(times[i]), slices.Min(times[i])
		b.ReportMetric(float64(med[c.name].Microseconds())/1000, c.name+"-ms")
	}
	b.ReportMetric(float64(med["shoal-stop"])/float64(med["docker-stop"]), "stop/docker")
	b.ReportMetric(float64(med["shoal-start"])/float64(med["docker-start"]), "start/docker")
	b.ReportMetric(float64(best["shoal-stop"])/float64(best["docker-stop"]), "best-stop/docker")
	b.ReportMetric(float64(best["shoal-start"])/float64(best["docker-start"]), "best-start/docker")
}
