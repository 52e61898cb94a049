package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"shoal/chaos"
	"shoal/internal/testenv"
)

// brokenBuilds are the shoal binaries built with a build tag, once per
// test process (two tests use the chaosbreak one).
var (
	brokenMu     sync.Mutex
	brokenBuilds = map[string]*brokenBuild{}
)

type brokenBuild struct {
	once sync.Once
	bin  string
	err  error
}

// TestMain removes the broken builds once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range brokenBuilds {
		if b.bin != "" {
			os.RemoveAll(filepath.Dir(b.bin))
		}
	}
	os.Exit(code)
}

// buildShoal returns a shoal whose shoal-node (beside it, where shoal runs
// it from) is built with tags: the server holds the broken code. shoal is
// testenv's, hard-linked (or copied) beside it: a symlink would be
// resolved back to testenv's shoal-node.
func buildShoal(t *testing.T, tags string) string {
	t.Helper()
	brokenMu.Lock()
	b, ok := brokenBuilds[tags]
	if !ok {
		b = &brokenBuild{}
		brokenBuilds[tags] = b
	}
	brokenMu.Unlock()
	shoal := testenv.Binary(t)
	root := testenv.RepoRoot(t)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "shoal-"+tags+"-")
		if err != nil {
			b.err = err
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-tags", tags, "-o", filepath.Join(dir, "shoal-node"), "./cmd/shoal-node")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build -tags %s ./cmd/shoal-node: %v\n%s", tags, err, out)
			return
		}
		b.bin = filepath.Join(dir, "shoal")
		if os.Link(shoal, b.bin) == nil {
			return
		}
		data, err := os.ReadFile(shoal)
		if err == nil {
			err = os.WriteFile(b.bin, data, 0o755)
		}
		b.err = err
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func invariants(r *chaos.Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Invariant)
	}
	return out
}

// The checker must be able to fail: a node whose provider delete checks
// for attachments and then deletes in a second step (test builds only) is
// caught breaking invariant 4, one whose update loop skips its compare
// is caught losing updates (linearizability), and one whose egress proxy
// admits by a stale policy is caught breaking invariant 16.
func TestBrokenGuaranteesAreCaught(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := buildShoal(t, "chaosbreak")
	for _, tc := range []struct {
		mode, scenario, invariant string
		// attempts: seeds to try before the test fails.
		attempts int
	}{
		// A broken provider delete shows up within seconds almost always;
		// a few attempts make a miss vanishingly unlikely.
		{"check-then-act", "provider-race", "4-attachments-consistent", 4},
		// Every write is observable and the contenders race on one
		// sandbox, so a lost update is caught within the first seconds
		// of traffic (docs/chaos.md: 20 runs out of 20 on the first
		// attempt). One attempt: a miss is a regression of the suite.
		{"skip-compare", "conflicts", "1-linearizable", 1},
		// Reads served from a watch cache that lags and does not wait to
		// catch up: a get after a finished write returns the state before
		// it, which the same check catches.
		{"stale-cache", "conflicts", "1-linearizable", 2},
		// A stop recorded as done but never done: the container runs on
		// while its record says STOPPED, which the samples catch.
		{"ack-before-stop", "stop-start", "15-stopped-stays-stopped", 4},
		// A proxy whose policy never forgets a rule: a connection begun
		// after an acknowledged removal of its destination is admitted.
		// The writers remove a rule every second or so per sandbox and
		// the clients try the removed destinations at once.
		{"stale-egress", "egress", "16-egress-admission-linearizable", 2},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			for attempt := 1; attempt <= tc.attempts; attempt++ {
				cfg := chaos.DefaultConfig()
				cfg.Binary = bin
				cfg.NodeEnv = []string{"SHOAL_CHAOS_BREAK=" + tc.mode}
				cfg.Scenarios = []string{tc.scenario}
				cfg.Duration = 15 * time.Second
				cfg.Seed = int64(attempt)
				cfg.Clients = 12
				// What a broken node gets wrong is in the history and the
				// samples of the traffic; what it leaves hanging (a stale
				// cache never catches up, so calls wait for it) is not
				// what is looked for here: short calls and a short quiet
				// keep those runs from waiting out the defaults (20 s per
				// call, 30 s to go quiet) for nothing.
				cfg.OpTimeout = 5 * time.Second
				cfg.DeletingBound = 10 * time.Second
				cfg.ReportDir = t.TempDir()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				rep, err := chaos.Run(ctx, cfg)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(invariants(rep), tc.invariant) {
					caught := slices.DeleteFunc(slices.Clone(rep.Violations), func(v chaos.Violation) bool { return v.Invariant != tc.invariant })
					t.Logf("attempt %d (seed %d, %d ops): caught %d time(s), first: %v", attempt, cfg.Seed, rep.Summary.Ops, len(caught), caught[0].Detail)
					if tc.invariant == "1-linearizable" {
						matches, _ := filepath.Glob(filepath.Join(cfg.ReportDir, "linearizability-*.html"))
						if len(matches) == 0 {
							t.Fatal("linearizability violation without porcupine's visualisation in the report dir")
						}
					}
					return
				}
				t.Logf("attempt %d (seed %d): not caught (%d ops)", attempt, cfg.Seed, rep.Summary.Ops)
			}
			t.Fatalf("SHOAL_CHAOS_BREAK=%s was not caught as %s in %d attempt(s)", tc.mode, tc.invariant, tc.attempts)
		})
	}
}

// A healthy node passes the same scenarios, and the report files are there.
func TestHealthyRunHasNoViolations(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	cfg := chaos.DefaultConfig()
	cfg.Binary = testenv.Binary(t)
	cfg.Scenarios = []string{"conflicts", "provider-race", "node-kill", "stop-start"}
	cfg.Duration = 40 * time.Second
	cfg.Seed = 7
	cfg.ReportDir = t.TempDir()
	// This test's checker runs under -race, several times slower than
	// shoal-lab's: stop-start's histories ran out of 30 s in CI (stops 31
	// and 33, inconclusive, passed on the rerun).
	cfg.CheckTimeout = 3 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteSummary(&sb)
	if len(rep.Violations) > 0 {
		t.Fatalf("violations on a healthy node:\n%s", sb.String())
	}
	if rep.Summary.Ops < 100 || rep.Summary.Faults["node-kill"] == 0 || rep.Summary.DeletesUnderFire == 0 {
		t.Fatalf("the run did too little to prove anything:\n%s", sb.String())
	}
	// A check that timed out proves nothing.
	for _, s := range rep.Scenarios {
		if strings.Contains(s.Linearizability, "inconclusive") {
			t.Fatalf("scenario %s: linearizability %s:\n%s", s.Name, s.Linearizability, sb.String())
		}
	}
	// The model had something to check: gets that returned several
	// writers' keys at once, label writes through the API and status
	// writes through the store.
	b, err := os.ReadFile(filepath.Join(cfg.ReportDir, "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ops []chaos.Op
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	multi := 0
	for _, o := range ops {
		if o.Kind == "sandbox-get" && strings.Contains(o.Writes, ",") {
			multi++
		}
	}
	if multi < 20 || rep.Summary.OpsByKind["sandbox-label"] == 0 || rep.Summary.OpsByKind["sandbox-status"] == 0 {
		t.Fatalf("%d gets saw more than one writer's key; the linearizability check had too little to check:\n%s", multi, sb.String())
	}
	// Stop and start raced the rest, and gets saw stopped sandboxes.
	stoppedGets := 0
	for _, o := range ops {
		if o.Kind == "sandbox-get" && o.Stopped {
			stoppedGets++
		}
	}
	if rep.Summary.OpsByKind["sandbox-stop"] == 0 || rep.Summary.OpsByKind["sandbox-start"] == 0 || stoppedGets == 0 {
		t.Fatalf("stop-start: %d stops, %d starts, %d gets of a stopped sandbox; too little to check:\n%s",
			rep.Summary.OpsByKind["sandbox-stop"], rep.Summary.OpsByKind["sandbox-start"], stoppedGets, sb.String())
	}
	for _, f := range []string{"report.json", "summary.txt", "history.json"} {
		if _, err := os.Stat(filepath.Join(cfg.ReportDir, f)); err != nil {
			t.Fatalf("report file: %v", err)
		}
	}
}
