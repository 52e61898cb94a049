package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
)

// Sample is one measurement of the node's resources.
type Sample struct {
	At         time.Time `json:"at"`
	Goroutines int       `json:"goroutines"`
	RSSBytes   int64     `json:"rss_bytes"`
	FDs        int       `json:"fds"`
	Containers int       `json:"containers"`
	EtcdDBSize int64     `json:"etcd_db_bytes"`
}

// SoakResult is the outcome of a soak.
type SoakResult struct {
	Seed       int64       `json:"seed"`
	Cycles     int         `json:"cycles"`
	Ops        int         `json:"ops"`
	Samples    []Sample    `json:"samples"`
	Violations []Violation `json:"violations"`
	// Growth lists the resources that grew past their bound.
	Growth []string `json:"growth"`
}

// Failed reports whether the soak found a problem.
func (r *SoakResult) Failed() bool { return len(r.Violations) > 0 || len(r.Growth) > 0 }

// Bounds on growth from the first cycle's sample (the baseline, taken after
// warm-up) to any later one. docs/chaos.md states them.
func growthViolations(base, s Sample) []string {
	var out []string
	if lim := base.Goroutines*3/2 + 50; s.Goroutines > lim {
		out = append(out, fmt.Sprintf("goroutines %d > bound %d (baseline %d)", s.Goroutines, lim, base.Goroutines))
	}
	if lim := base.RSSBytes*3/2 + 64<<20; s.RSSBytes > lim {
		out = append(out, fmt.Sprintf("RSS %d MiB > bound %d MiB (baseline %d MiB)", s.RSSBytes>>20, lim>>20, base.RSSBytes>>20))
	}
	if lim := base.FDs + 50; s.FDs > lim {
		out = append(out, fmt.Sprintf("open fds %d > bound %d (baseline %d)", s.FDs, lim, base.FDs))
	}
	if lim := base.Containers; s.Containers > lim {
		out = append(out, fmt.Sprintf("containers after cleanup %d > bound %d", s.Containers, lim))
	}
	if lim := base.EtcdDBSize*2 + 64<<20; s.EtcdDBSize > lim {
		out = append(out, fmt.Sprintf("etcd db %d MiB > bound %d MiB (baseline %d MiB)", s.EtcdDBSize>>20, lim>>20, base.EtcdDBSize>>20))
	}
	return out
}

// Soak runs every scenario back to back until total has passed, checking
// the invariants each cycle and sampling resources after each cycle's
// cleanup.
func Soak(ctx context.Context, cfg Config, total time.Duration) (*SoakResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoint != "" {
		return nil, fmt.Errorf("--endpoint: soak samples the node process, so it needs a node it starts itself")
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	res := &SoakResult{Seed: cfg.Seed}
	h := newHistory()
	end := time.Now().Add(total)
	per := cfg.Duration / time.Duration(len(cfg.Scenarios))
	var base *Sample
	for cycle := 0; time.Now().Before(end) && ctx.Err() == nil; cycle++ {
		for i, name := range cfg.Scenarios {
			inst := fmt.Sprintf("%s-c%d", name, cycle)
			sr, err := runScenario(ctx, e, h, cfg, cycle*len(cfg.Scenarios)+i, name, inst, per, nil)
			if err != nil {
				return res, fmt.Errorf("cycle %d, scenario %s: %w", cycle, name, err)
			}
			res.Violations = append(res.Violations, sr.Violations...)
		}
		if err := cleanup(ctx, e); err != nil {
			return res, fmt.Errorf("cycle %d cleanup: %w", cycle, err)
		}
		if err := compact(ctx, e); err != nil {
			return res, fmt.Errorf("cycle %d compaction: %w", cycle, err)
		}
		s, err := sample(ctx, e)
		if err != nil {
			return res, err
		}
		res.Samples = append(res.Samples, s)
		res.Cycles = cycle + 1
		logf(cfg, "soak cycle %d: goroutines %d, rss %d MiB, fds %d, containers %d, etcd db %d MiB, violations so far %d",
			cycle, s.Goroutines, s.RSSBytes>>20, s.FDs, s.Containers, s.EtcdDBSize>>20, len(res.Violations))
		if base == nil {
			base = &s
			continue
		}
		if g := growthViolations(*base, s); len(g) > 0 {
			res.Growth = append(res.Growth, g...)
			break
		}
		if len(res.Violations) > 0 {
			break
		}
	}
	res.Ops = len(h.snapshot())
	if cfg.ReportDir != "" {
		if err := os.MkdirAll(cfg.ReportDir, 0o755); err != nil {
			return res, err
		}
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(filepath.Join(cfg.ReportDir, "soak.json"), b, 0o644); err != nil {
			return res, err
		}
	}
	return res, ctx.Err()
}

// compact drops etcd's history up to now and defragments, so that the db
// size sampled next measures live keys (a leak of records, intents or
// attachment keys would show) rather than the history a cycle wrote. The
// cycle's checks, which read that history, are done by then.
func compact(ctx context.Context, e *env) error {
	resp, err := e.raw.Get(ctx, "compact-marker")
	if err != nil {
		return err
	}
	if _, err := e.raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	_, err = e.raw.Defragment(ctx, e.etcd.Endpoint())
	return err
}

// cleanup deletes every sandbox (wait) and then every provider, so each
// cycle ends from the same state.
func cleanup(ctx context.Context, e *env) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sbs, err := e.client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000})
	if err != nil {
		return err
	}
	for _, sb := range sbs.Items {
		if _, err := e.client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: sb.Meta.Name, Wait: true}); err != nil && !strings.Contains(err.Error(), "not found") {
			return err
		}
	}
	ps, err := e.client.ListProviders(ctx, &shoalv1.ListProvidersRequest{PageSize: 1000})
	if err != nil {
		return err
	}
	for _, p := range ps.Items {
		if _, err := e.client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: p.Meta.Name, Wait: true}); err != nil && !strings.Contains(err.Error(), "not found") {
			return err
		}
	}
	return nil
}

func sample(ctx context.Context, e *env) (Sample, error) {
	s := Sample{At: time.Now()}
	var err error
	if s.RSSBytes, s.FDs, err = procStats(e.pid()); err != nil {
		return s, fmt.Errorf("node process stats: %w", err)
	}
	if s.Goroutines, err = goroutines(ctx, e.debug); err != nil {
		return s, err
	}
	cs, err := e.containers(ctx)
	if err != nil {
		return s, err
	}
	s.Containers = len(cs)
	st, err := e.raw.Status(ctx, e.etcd.Endpoint())
	if err != nil {
		return s, err
	}
	s.EtcdDBSize = st.DbSize
	return s, nil
}

// goroutines reads the node's goroutine count from its pprof listener.
func goroutines(ctx context.Context, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("goroutine profile: %w", err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	// "goroutine profile: total N"
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, fmt.Errorf("goroutine profile: unexpected %q", line)
	}
	return strconv.Atoi(f[len(f)-1])
}

// WriteSummary prints the soak's samples and verdict.
func (r *SoakResult) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\ncycles\t%d\nops\t%d\n\n", r.Seed, r.Cycles, r.Ops)
	fmt.Fprintln(tw, "CYCLE\tGOROUTINES\tRSS MiB\tFDS\tCONTAINERS\tETCD DB MiB")
	for i, s := range r.Samples {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\n", i, s.Goroutines, s.RSSBytes>>20, s.FDs, s.Containers, s.EtcdDBSize>>20)
	}
	fmt.Fprintf(tw, "\nVIOLATIONS\t%d\nGROWTH PAST BOUND\t%d\n", len(r.Violations), len(r.Growth))
	tw.Flush()
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  [%s] %s: %s\n", v.Invariant, v.Scenario, v.Detail)
	}
	for _, g := range r.Growth {
		fmt.Fprintf(w, "  [growth] %s\n", g)
	}
}
