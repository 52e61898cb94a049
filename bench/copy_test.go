package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// `shoal sandbox cp` of one file into a sandbox through a node that does
// not own it, vs `docker cp` of the same file into the same container on
// the owner's engine (the raw work it wraps): both whole CLI processes,
// interleaved, three rounds each, the file removed in the sandbox before
// every copy; and the same copy through the owner, for what the hop costs. Two nodes with an engine each (the test cluster harness).
// The file is 1 GiB, or $SHOAL_BENCH_CP_BYTES; docker is $DOCKER, else
// docker on PATH. Reported: each side's median seconds and MiB/s, and the
// ratio of the sums (goal: ≤ 1.3), through a non-owner and through the
// owner.
func BenchmarkCopyVsDockerCp(b *testing.B) {
	testenv.RequireDocker(b)
	bin := testenv.Binary(b)
	dockerBin := os.Getenv("DOCKER")
	if dockerBin == "" {
		var err error
		if dockerBin, err = exec.LookPath("docker"); err != nil {
			b.Skip("no docker CLI on PATH (set $DOCKER)")
		}
	}
	size := int64(1 << 30)
	if v := os.Getenv("SHOAL_BENCH_CP_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("SHOAL_BENCH_CP_BYTES=%q: want a positive number of bytes", v)
		}
		size = n
	}
	c := testenv.StartCluster(b, testenv.ClusterConfig{Nodes: 2, LeaseTTL: benchLeaseTTL})
	if !c.SeparateEngines() {
		b.Log("the nodes share one Docker engine here")
	}
	ctx := context.Background()
	sb, err := c.Client(0).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true,
		Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "cp"}, Spec: &shoalv1.SandboxSpec{Node: c.ID(1)}}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		b.Fatalf("create on node 1: %v %v", sb.GetStatus(), err)
	}
	src := filepath.Join(b.TempDir(), "blob")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{9}), size); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	clean := func() {
		st, err := c.Client(1).Exec(ctx, &shoalv1.ExecRequest{Name: "cp", Command: []string{"rm", "-f", "/blob"}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			ch, err := st.Recv()
			if err != nil {
				b.Fatalf("rm in the sandbox: %v", err)
			}
			if ch.Exited {
				return
			}
		}
	}
	timed := func(name string, args []string, env ...string) time.Duration {
		clean()
		cmd := exec.Command(name, args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return time.Since(t0)
	}
	shoalCp := func(node int) time.Duration {
		return timed(bin, []string{"sandbox", "cp", src, "cp:/blob"}, "SHOAL_ENDPOINT="+c.Addr(node))
	}
	dockerCp := func() time.Duration {
		env := []string{"HOME=" + b.TempDir()}
		if h := c.Engine(1).Host; h != "" {
			env = append(env, "DOCKER_HOST="+h)
		}
		return timed(dockerBin, []string{"cp", src, sb.Status.ContainerId + ":/blob"}, env...)
	}
	// Through the owner too, for what the forwarding hop costs.
	var viaShoal, viaOwner, viaDocker []time.Duration
	for i := range 3 * b.N {
		if i%2 == 0 {
			viaShoal = append(viaShoal, shoalCp(0))
			viaDocker = append(viaDocker, dockerCp())
			viaOwner = append(viaOwner, shoalCp(1))
		} else {
			viaOwner = append(viaOwner, shoalCp(1))
			viaDocker = append(viaDocker, dockerCp())
			viaShoal = append(viaShoal, shoalCp(0))
		}
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	sum := func(d []time.Duration) (s time.Duration) {
		for _, x := range d {
			s += x
		}
		return s
	}
	b.Logf("%d MiB: shoal sandbox cp through a non-owner %v, through the owner %v; docker cp on the owner's engine %v", size>>20, viaShoal, viaOwner, viaDocker)
	mib := float64(size) / (1 << 20)
	b.ReportMetric(median(viaShoal).Seconds(), "shoal-s")
	b.ReportMetric(median(viaOwner).Seconds(), "owner-s")
	b.ReportMetric(median(viaDocker).Seconds(), "docker-s")
	b.ReportMetric(mib/median(viaShoal).Seconds(), "shoal-MiB/s")
	b.ReportMetric(mib/median(viaDocker).Seconds(), "docker-MiB/s")
	b.ReportMetric(float64(sum(viaShoal))/float64(sum(viaDocker)), "ratio")
	b.ReportMetric(float64(sum(viaOwner))/float64(sum(viaDocker)), "owner-ratio")
}
