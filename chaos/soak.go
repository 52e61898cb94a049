package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/backoff"
)

// Sample is one measurement of a node's resources after a cycle's cleanup.
type Sample struct {
	At    time.Time `json:"at"`
	Cycle int       `json:"cycle"`
	// Node is the node's id; on a cluster every node is sampled (a
	// replacement from its first cycle on).
	Node       string `json:"node"`
	Goroutines int    `json:"goroutines"`
	RSSBytes   int64  `json:"rss_bytes"`
	FDs        int    `json:"fds"`
	// Containers are the shoal containers on the node's engine.
	Containers int `json:"containers"`
	// EtcdDBSize is the size of the node's etcd member's database (0 for
	// a worker, which runs none).
	EtcdDBSize int64 `json:"etcd_db_bytes"`
}

// SoakResult is the outcome of a soak.
type SoakResult struct {
	Seed       int64       `json:"seed"`
	Cluster    int         `json:"cluster,omitempty"`
	Workers    int         `json:"workers,omitempty"`
	Cycles     int         `json:"cycles"`
	Ops        int         `json:"ops"`
	Faults     int         `json:"faults"`
	Samples    []Sample    `json:"samples"`
	Violations []Violation `json:"violations"`
	// Growth lists the resources that grew past their bound.
	Growth []string `json:"growth"`
	// FaultsNotInjected are the faults whose every injection attempt
	// failed (the lab's tools, not shoal; they fail nothing).
	FaultsNotInjected []string `json:"faults_not_injected,omitempty"`
	// Started and Finished bound the soak.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Failed reports whether the soak found a problem.
func (r *SoakResult) Failed() bool { return len(r.Violations) > 0 || len(r.Growth) > 0 }

// Bounds on growth from a node's first sample (its baseline, taken after
// a cycle of warm-up) to any later one. docs/chaos.md states them.
func growthViolations(base, s Sample) []string {
	var out []string
	node := ""
	if s.Node != "" {
		node = "node " + s.Node + ": "
	}
	if lim := base.Goroutines*3/2 + 50; s.Goroutines > lim {
		out = append(out, fmt.Sprintf("%sgoroutines %d > bound %d (baseline %d)", node, s.Goroutines, lim, base.Goroutines))
	}
	if lim := base.RSSBytes*3/2 + 64<<20; s.RSSBytes > lim {
		out = append(out, fmt.Sprintf("%sRSS %d MiB > bound %d MiB (baseline %d MiB)", node, s.RSSBytes>>20, lim>>20, base.RSSBytes>>20))
	}
	if lim := base.FDs + 50; s.FDs > lim {
		out = append(out, fmt.Sprintf("%sopen fds %d > bound %d (baseline %d)", node, s.FDs, lim, base.FDs))
	}
	if lim := base.Containers; s.Containers > lim {
		out = append(out, fmt.Sprintf("%scontainers after cleanup %d > bound %d", node, s.Containers, lim))
	}
	if lim := base.EtcdDBSize*2 + 64<<20; s.EtcdDBSize > lim {
		out = append(out, fmt.Sprintf("%setcd db %d MiB > bound %d MiB (baseline %d MiB)", node, s.EtcdDBSize>>20, lim>>20, base.EtcdDBSize>>20))
	}
	return out
}

// Soak runs every scenario back to back until total has passed, checking
// the invariants each cycle and sampling every node's resources after each
// cycle's cleanup.
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
	res := &SoakResult{Seed: cfg.Seed, Cluster: cfg.Cluster, Workers: cfg.Workers, Started: time.Now()}
	h := newHistory()
	e.hist = h
	end := time.Now().Add(total)
	durs := scenarioDurations(cfg.Scenarios, cfg.Duration)
	base := map[string]Sample{}
	for cycle := 0; time.Now().Before(end) && ctx.Err() == nil; cycle++ {
		for i, name := range cfg.Scenarios {
			inst := fmt.Sprintf("%s-c%d", name, cycle)
			sr, err := runScenario(ctx, e, h, cfg, cycle*len(cfg.Scenarios)+i, name, inst, durs[i], nil)
			if err != nil {
				return res, res.finish(cfg, h, fmt.Errorf("cycle %d, scenario %s: %w", cycle, name, err))
			}
			res.Violations = append(res.Violations, sr.Violations...)
			res.Faults += injectedFaults(sr.Faults)
			for _, f := range sr.Faults {
				if !f.Injected() {
					res.FaultsNotInjected = append(res.FaultsNotInjected, fmt.Sprintf("%s %s (%d attempts): %s", inst, f.Name, f.Attempts, f.NotInjected))
				}
			}
		}
		if err := cleanup(ctx, e); err != nil {
			return res, res.finish(cfg, h, fmt.Errorf("cycle %d cleanup: %w", cycle, err))
		}
		if err := compact(ctx, e); err != nil {
			return res, res.finish(cfg, h, fmt.Errorf("cycle %d compaction: %w", cycle, err))
		}
		ss, err := sampleNodes(ctx, e, cycle)
		if err != nil {
			return res, res.finish(cfg, h, fmt.Errorf("cycle %d sample: %w", cycle, err))
		}
		res.Samples = append(res.Samples, ss...)
		res.Cycles = cycle + 1
		for _, s := range ss {
			logf(cfg, "soak cycle %d: node %s: goroutines %d, rss %d MiB, fds %d, containers %d, etcd db %d MiB",
				cycle, s.Node, s.Goroutines, s.RSSBytes>>20, s.FDs, s.Containers, s.EtcdDBSize>>20)
			b, ok := base[s.Node]
			if !ok {
				base[s.Node] = s
				continue
			}
			res.Growth = append(res.Growth, growthViolations(b, s)...)
		}
		logf(cfg, "soak cycle %d done: %d violations, %d growth past bound so far", cycle, len(res.Violations), len(res.Growth))
		if res.Failed() {
			break
		}
	}
	return res, res.finish(cfg, h, ctx.Err())
}

// finish fills the totals and writes soak.json (also for a soak that
// could not go on: what it saw until then is the evidence).
func (r *SoakResult) finish(cfg Config, h *history, err error) error {
	r.Finished = time.Now()
	r.Ops = len(h.snapshot())
	if cfg.ReportDir == "" {
		return err
	}
	if werr := os.MkdirAll(cfg.ReportDir, 0o755); werr != nil {
		return errors.Join(err, werr)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if werr := os.WriteFile(filepath.Join(cfg.ReportDir, "soak.json"), b, 0o644); werr != nil {
		return errors.Join(err, werr)
	}
	var sum bytes.Buffer
	r.WriteSummary(&sum)
	return errors.Join(err, os.WriteFile(filepath.Join(cfg.ReportDir, "summary.txt"), sum.Bytes(), 0o644))
}

// compact drops etcd's history up to now and defragments every member,
// so that the db size sampled next measures live keys (a leak of records,
// intents or attachment keys would show) rather than the history a cycle
// wrote. The cycle's checks, which read that history, are done by then.
func compact(ctx context.Context, e *env) error {
	resp, err := e.raw.Get(ctx, "compact-marker")
	if err != nil {
		return err
	}
	if _, err := e.raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	for _, ep := range e.members() {
		if _, err := e.raw.Defragment(ctx, ep); err != nil {
			return fmt.Errorf("defragment %s: %w", ep, err)
		}
	}
	return nil
}

// members are the etcd client URLs of the members under test.
func (e *env) members() []string {
	if e.hosts != nil {
		return e.hosts.EtcdEndpoints()
	}
	return []string{e.etcd.Endpoint()}
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

// sampleNodes samples every node under test: the one owned node, or
// every host of the cluster not replaced. The cluster has converged after
// the cycle's cleanup, but a node just restarted may still be starting its
// debug listener: each node gets a short deadline.
func sampleNodes(ctx context.Context, e *env, cycle int) ([]Sample, error) {
	if e.hosts == nil {
		s, err := sampleOne(ctx, e.pid, e.debug, func(ctx context.Context) (int, error) {
			cs, err := e.containers(ctx)
			return len(cs), err
		}, e.etcd.Endpoint(), e)
		s.Node, s.Cycle = e.nodeID, cycle
		return []Sample{s}, err
	}
	var out []Sample
	for _, i := range e.liveIndexes() {
		id := e.hosts.ID(i)
		eng := e.hosts.Engine(i)
		pid := func() int {
			p, err := e.hosts.PID(ctx, i)
			if err != nil {
				return 0
			}
			return p
		}
		var s Sample
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := backoff.Retry(sctx, sampleRetry, func(int) error {
			var err error
			s, err = sampleOne(sctx, pid, e.hosts.DebugAddr(i), func(ctx context.Context) (int, error) {
				cs, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
					filters.Arg("label", docker.LabelManaged+"=true"), filters.Arg("label", docker.LabelNode+"="+id))})
				return len(cs), err
			}, e.hosts.ClientURL(i), e)
			return err
		})
		cancel()
		if err != nil {
			return out, fmt.Errorf("node %s: %w", id, err)
		}
		s.Node, s.Cycle = id, cycle
		out = append(out, s)
	}
	return out, nil
}

// sampleRetry spaces the tries of a node's sample (a node may be busy
// just after a cycle's faults).
var sampleRetry = backoff.Policy{Initial: 500 * time.Millisecond, Max: 2 * time.Second}

// sampleOne reads one node's process figures from /proc (pid), its
// goroutines from its pprof listener (debug), its container count, and
// its etcd member's db size (member "" for a worker).
func sampleOne(ctx context.Context, pid func() int, debug string, containers func(context.Context) (int, error), member string, e *env) (Sample, error) {
	s := Sample{At: time.Now()}
	p := pid()
	if p == 0 {
		return s, errors.New("node process not running")
	}
	var err error
	if s.RSSBytes, s.FDs, err = procStats(p); err != nil {
		return s, fmt.Errorf("node process stats: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if s.Goroutines, err = goroutines(cctx, debug); err != nil {
		return s, err
	}
	if s.Containers, err = containers(cctx); err != nil {
		return s, fmt.Errorf("containers: %w", err)
	}
	if member != "" {
		st, err := e.raw.Status(cctx, member)
		if err != nil {
			return s, fmt.Errorf("etcd member %s: %w", member, err)
		}
		s.EtcdDBSize = st.DbSize
	}
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

// WriteSummary prints the soak's samples, each node's range and the
// verdict.
func (r *SoakResult) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	if r.Cluster > 0 {
		fmt.Fprintf(tw, "cluster\t%d voters, %d workers\n", r.Cluster, r.Workers)
	}
	fmt.Fprintf(tw, "cycles\t%d\nops\t%d\nfaults\t%d\nfaults not injected\t%d\n", r.Cycles, r.Ops, r.Faults, len(r.FaultsNotInjected))
	if !r.Started.IsZero() && !r.Finished.IsZero() {
		fmt.Fprintf(tw, "elapsed\t%s\n", r.Finished.Sub(r.Started).Round(time.Second))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CYCLE\tNODE\tGOROUTINES\tRSS MiB\tFDS\tCONTAINERS\tETCD DB KiB")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Cycle, s.Node, s.Goroutines, s.RSSBytes>>20, s.FDs, s.Containers, kib(s.EtcdDBSize))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tCYCLES\tGOROUTINES\tRSS MiB\tFDS\tCONTAINERS\tETCD DB KiB")
	for _, nr := range r.NodeRanges() {
		db := "-"
		if nr.Max.EtcdDBSize > 0 {
			db = kib(nr.Min.EtcdDBSize) + "-" + kib(nr.Max.EtcdDBSize)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d-%d\t%d-%d\t%d-%d\t%d-%d\t%s\n", nr.Node, nr.Cycles,
			nr.Min.Goroutines, nr.Max.Goroutines, nr.Min.RSSBytes>>20, nr.Max.RSSBytes>>20,
			nr.Min.FDs, nr.Max.FDs, nr.Min.Containers, nr.Max.Containers, db)
	}
	fmt.Fprintf(tw, "\nVIOLATIONS\t%d\nGROWTH PAST BOUND\t%d\n", len(r.Violations), len(r.Growth))
	tw.Flush()
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  [%s] %s: %s\n", v.Invariant, v.Scenario, v.Detail)
	}
	for _, g := range r.Growth {
		fmt.Fprintf(w, "  [growth] %s\n", g)
	}
	for _, f := range r.FaultsNotInjected {
		fmt.Fprintf(w, "  [not injected] %s\n", f)
	}
}

// kib is a db size in KiB; "-" for a worker's (it has no member).
func kib(b int64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatInt(b>>10, 10)
}

// NodeRange is the smallest and largest of each figure a node had over
// the soak's samples.
type NodeRange struct {
	Node     string
	Cycles   int
	Min, Max Sample
}

// NodeRanges are every sampled node's ranges, in the order first sampled.
func (r *SoakResult) NodeRanges() []NodeRange {
	var out []NodeRange
	at := map[string]int{}
	for _, s := range r.Samples {
		i, ok := at[s.Node]
		if !ok {
			at[s.Node] = len(out)
			out = append(out, NodeRange{Node: s.Node, Cycles: 1, Min: s, Max: s})
			continue
		}
		nr := &out[i]
		nr.Cycles++
		nr.Min.Goroutines, nr.Max.Goroutines = min(nr.Min.Goroutines, s.Goroutines), max(nr.Max.Goroutines, s.Goroutines)
		nr.Min.RSSBytes, nr.Max.RSSBytes = min(nr.Min.RSSBytes, s.RSSBytes), max(nr.Max.RSSBytes, s.RSSBytes)
		nr.Min.FDs, nr.Max.FDs = min(nr.Min.FDs, s.FDs), max(nr.Max.FDs, s.FDs)
		nr.Min.Containers, nr.Max.Containers = min(nr.Min.Containers, s.Containers), max(nr.Max.Containers, s.Containers)
		nr.Min.EtcdDBSize, nr.Max.EtcdDBSize = min(nr.Min.EtcdDBSize, s.EtcdDBSize), max(nr.Max.EtcdDBSize, s.EtcdDBSize)
	}
	return out
}
