package lab_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/chaos"
	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/scale"
)

// chaos soak's flags through the binary: bad combinations are usage
// errors naming the flag, before anything is started.
func TestChaosSoakFlagsThroughBinary(t *testing.T) {
	lab, shoal := testenv.LabBinary(t), testenv.Binary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"chaos", "soak", "--workers", "1"}, "--workers"},
		{[]string{"chaos", "soak", "--cluster", "2"}, "--cluster"},
		{[]string{"chaos", "soak", "--cycle", "10ms"}, "--cycle"},
		// A cluster cycle is a minute per scenario.
		{[]string{"chaos", "soak", "--duration", "5m", "--cluster", "3"}, fmt.Sprintf("shorter than one cycle (%s)", time.Duration(len(chaos.ScenarioNames()))*time.Minute)},
		{[]string{"chaos", "soak", "--duration", "1m"}, "shorter than one cycle (2m0s)"},
		{[]string{"chaos", "soak", "extra"}, "takes no arguments"},
	} {
		// SHOAL_ENDPOINT set, as a user of the CLI has it: a soak starts
		// its own nodes and does not look at it.
		what := strings.Join(tc.args, " ")
		r := run(t, lab, []string{"SHOAL_ENDPOINT=127.0.0.1:1"}, append(tc.args, "--shoal-binary", shoal)...).must(t, cli.ExitUsage, what)
		r.stderrHas(t, what, tc.want)
	}
	r := run(t, lab, []string{"SHOAL_ENDPOINT=127.0.0.1:1"}, "chaos", "soak", "--etcd-endpoints", "http://127.0.0.1:2").must(t, cli.ExitUsage, "soak --etcd-endpoints")
	r.stderrHas(t, "soak --etcd-endpoints (a run-only flag)", "etcd-endpoints")
	r = run(t, lab, nil, "chaos", "soak", "--help").must(t, 0, "chaos soak --help")
	for _, want := range []string{"--cluster", "--workers", "--cycle", "--shoal-binary", "shoal-lab chaos soak --cluster 3 --duration 2h"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("chaos soak --help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// bench cluster through the binary: bad flags are usage errors naming the
// flag, before anything is started.
func TestBenchClusterFlagsThroughBinary(t *testing.T) {
	lab, shoal := testenv.LabBinary(t), testenv.Binary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "cluster", "--hollow-nodes", "1"}, "--hollow-nodes"},
		{[]string{"bench", "cluster", "--real-nodes", "1"}, "--real-nodes"},
		{[]string{"bench", "cluster", "--growth", "10,x"}, "--growth"},
		{[]string{"bench", "cluster", "--node-ttl", "10ms"}, "--node-ttl"},
		{[]string{"bench", "cluster", "--hollow-latency", "-1s"}, "--hollow-latency"},
		{[]string{"bench", "cluster", "--growth", "1000,0"}, "--growth: 0 is not a record count"},
		{[]string{"bench", "cluster", "--growth", "300000"}, "--growth: 300000 is above"},
		{[]string{"bench", "cluster", "extra"}, "takes no arguments"},
	} {
		what := strings.Join(tc.args, " ")
		r := run(t, lab, nil, append(tc.args, "--shoal-binary", shoal)...).must(t, cli.ExitUsage, what)
		r.stderrHas(t, what, tc.want)
	}
	// The fleet's hollow nodes are `shoal node start --runtime hollow`.
	r := run(t, shoal, nil, "node", "start", "--hollow-latency", "10ms").must(t, cli.ExitUsage, "node start --hollow-latency")
	r.stderrHas(t, "node start --hollow-latency", "only with --runtime hollow")
}

// A tiny fleet runs end to end through shoal-lab and writes its report and
// plot.
func TestBenchClusterTinyFleetThroughBinary(t *testing.T) {
	lab, shoal := testenv.LabBinary(t), testenv.Binary(t)
	testenv.RequireDocker(t) // the real nodes run the Docker runtime
	dir := t.TempDir()
	r := run(t, lab, nil, "bench", "cluster", "--shoal-binary", shoal, "--hollow-nodes", "3", "--sandboxes-per-node", "10", "--real-nodes", "2",
		"--clients", "4", "--growth", "10,40", "--node-ttl", "2s", "--lease-ttl", "2s", "--report", dir).must(t, 0, "bench cluster of a tiny fleet")
	// 40 is past the fleet's 30: measured after the losses, on the live
	// hollow nodes (the deleted sandbox of the leader's kill no longer counts).
	for _, want := range []string{"3 hollow nodes × 10 sandboxes", "\n10 ", "\n30 ", "\n40 ", "hollow node SIGKILL → its", "leader SIGKILL → new term recorded", "→ its first resync done: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, f := range []string{"report.json", "summary.txt", "growth.png", "heap-0.pb.gz", "heap-10.pb.gz", "heap-30.pb.gz", "heap-40.pb.gz"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
	var rep scale.Report
	if b, err := os.ReadFile(filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if rep.BaseLiveHeap <= 0 {
		t.Errorf("base live heap %d", rep.BaseLiveHeap)
	}
	for _, p := range rep.Growth {
		if p.LiveHeapBytes <= 0 || p.LiveHeapBytes > p.RSSBytes {
			t.Errorf("at %d records: live heap %d, RSS %d", p.Records, p.LiveHeapBytes, p.RSSBytes)
		}
	}
}
