package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal/internal/testenv"
)

// The CLI's speed where users feel it (issue 22): whole processes, side by
// side in one run against one node, interleaved so that each sees the same
// machine:
//
//   - `shoal sandbox list -o json` of 3,000 sandboxes vs
//     `etcdctl get --prefix -w json` of the same keys (goal: ratio ≤ 1);
//   - `shoal sandbox list -o yaml` vs `-o json` (goal: ≤ 2);
//   - `shoal --help` vs `etcdctl version` (goal: ≤ 1).
//
// Each figure is the median wall time (start to exit, stdout read through
// a pipe) of -benchtime rounds, a round running every command once, in a
// shuffled order; the
// ratios are given of the medians and of the best runs. etcdctl
// is $ETCDCTL, else etcdctl on PATH, else $GOPATH/bin/etcdctl; build it at
// the etcd version go.mod has (docs/benchmarks.md says how).
func BenchmarkCLIVsEtcdctl(b *testing.B) {
	testenv.RequireDocker(b)
	bin := testenv.Binary(b)
	etcdctl := etcdctlBinary(b)
	n := testenv.StartNode(b, testenv.NodeConfig(b))
	ep := n.EtcdEndpoint()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	const sandboxes = 3000
	fill(b, c, n.Store(), sandboxes)
	prefix := strings.TrimSuffix(n.Store().SandboxKey("default", "x"), "x")

	shoal := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "SHOAL_ENDPOINT=" + n.Addr()}
		return cmd
	}
	ctl := func(args ...string) *exec.Cmd {
		cmd := exec.Command(etcdctl, append([]string{"--endpoints=" + ep}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir()}
		return cmd
	}
	cmds := []struct {
		name string
		cmd  func() *exec.Cmd
		// check, if set, vets the output of the first run.
		check func(out []byte) error
	}{
		{"list-json", func() *exec.Cmd { return shoal("sandbox", "list", "-o", "json") }, func(out []byte) error {
			var v struct{ Items []json.RawMessage }
			if err := json.Unmarshal(out, &v); err != nil {
				return err
			}
			return wantItems(len(v.Items), sandboxes)
		}},
		{"list-yaml", func() *exec.Cmd { return shoal("sandbox", "list", "-o", "yaml") }, func(out []byte) error {
			return wantItems(bytes.Count(out, []byte("\n- ")), sandboxes)
		}},
		{"etcdctl-get", func() *exec.Cmd { return ctl("get", "--prefix", prefix, "-w", "json") }, func(out []byte) error {
			var v struct{ Kvs []json.RawMessage }
			if err := json.Unmarshal(out, &v); err != nil {
				return err
			}
			return wantItems(len(v.Kvs), sandboxes)
		}},
		{"help", func() *exec.Cmd { return shoal("--help") }, nil},
		{"etcdctl-version", func() *exec.Cmd { return ctl("version") }, nil},
	}
	times := make([][]time.Duration, len(cmds))
	for _, c := range cmds {
		out, d := runTimed(b, c.cmd())
		if c.check != nil {
			if err := c.check(out); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
		}
		b.Logf("%s: %d bytes of output, first run %s", c.name, len(out), d)
	}
	// Each round runs the commands in an order of its own (seeded: the
	// same rounds each run): in a fixed order, a command always ran
	// right after the same other one and met the machine as that one left
	// it (its page cache, its CPU frequency, a GC of the node).
	order := make([]int, len(cmds))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(22, 3))
	b.ResetTimer()
	for range b.N {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			_, d := runTimed(b, cmds[i].cmd())
			times[i] = append(times[i], d)
		}
	}
	b.StopTimer()
	med := make(map[string]time.Duration)
	for i, c := range cmds {
		med[c.name] = median(times[i])
		b.ReportMetric(float64(med[c.name].Microseconds())/1000, c.name+"-ms")
	}
	b.ReportMetric(float64(med["list-json"])/float64(med["etcdctl-get"]), "json/etcdctl")
	b.ReportMetric(float64(med["list-yaml"])/float64(med["list-json"]), "yaml/json")
	b.ReportMetric(float64(med["help"])/float64(med["etcdctl-version"]), "help/version")
	// The best runs as well: on a shared machine the median moves with
	// the load of the moment, the best run much less.
	best := make(map[string]time.Duration)
	for i, c := range cmds {
		best[c.name] = slices.Min(times[i])
	}
	b.ReportMetric(float64(best["list-json"])/float64(best["etcdctl-get"]), "best-json/etcdctl")
	b.ReportMetric(float64(best["list-yaml"])/float64(best["list-json"]), "best-yaml/json")
	b.ReportMetric(float64(best["help"])/float64(best["etcdctl-version"]), "best-help/version")
}

func wantItems(got, want int) error {
	if got != want {
		return fmt.Errorf("printed %d items, want %d", got, want)
	}
	return nil
}

// runTimed runs cmd to its exit, its stdout read through a pipe, and
// returns that output and the wall time from start to exit.
func runTimed(b *testing.B, cmd *exec.Cmd) ([]byte, time.Duration) {
	b.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
	}
	return out.Bytes(), time.Since(t0)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// etcdctlBinary finds etcdctl (see BenchmarkCLIVsEtcdctl), or skips.
func etcdctlBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("ETCDCTL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("etcdctl"); err == nil {
		return p
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "etcdctl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	b.Skip("skipping: no etcdctl (set ETCDCTL, or see docs/benchmarks.md to build it)")
	return ""
}
