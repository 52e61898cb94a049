package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run.
type Report struct {
	Seed       int64            `json:"seed"`
	Config     map[string]any   `json:"config"`
	Started    time.Time        `json:"started"`
	Finished   time.Time        `json:"finished"`
	Scenarios  []ScenarioReport `json:"scenarios"`
	Violations []Violation      `json:"violations"`
	Summary    Summary          `json:"summary"`
}

// ScenarioReport is one scenario's part.
type ScenarioReport struct {
	Name            string        `json:"name"`
	Doc             string        `json:"doc"`
	Started         time.Time     `json:"started"`
	Finished        time.Time     `json:"finished"`
	Ops             int           `json:"ops"`
	Faults          []FaultRecord `json:"faults"`
	Harassment      Harassment    `json:"harassment"`
	QuietAfter      time.Duration `json:"quiet_after_ns"`
	FencedWrites    int           `json:"fenced_writes_checked"`
	Linearizability string        `json:"linearizability"`
	Violations      []Violation   `json:"violations"`
	// On a cluster: what the cluster samplers saw (invariants 8, 9, 13,
	// 14) and how long the cluster took to converge after the faults.
	Cluster     *ClusterFigures     `json:"cluster,omitempty"`
	Convergence *ConvergenceFigures `json:"convergence,omitempty"`
	// Egress: the egress scenario's attempts and how they ended
	// (invariants 16 and 17), or why it checked none.
	Egress *EgressFigures `json:"egress,omitempty"`
}

// FaultRecord is one fault the schedule drew: injected, or, when every
// attempt failed, not injected (NotInjected says why).
type FaultRecord struct {
	Name string        `json:"name"`
	At   time.Time     `json:"at"`
	Held time.Duration `json:"held_ns"`
	// Target is the node(s) a cluster fault hit.
	Target string `json:"target,omitempty"`
	// Failover, for a leader kill: kill → the next leader's first fenced
	// write (its term record).
	Failover time.Duration `json:"failover_ns,omitempty"`
	// Attempts is how many injections were tried (more than one: the
	// first failed and was retried).
	Attempts int `json:"attempts"`
	// NotInjected is the last injection error when no attempt took: the
	// lab failed, not shoal, and the run went on without this fault.
	NotInjected string `json:"not_injected,omitempty"`
}

// Injected reports whether the fault took.
func (f FaultRecord) Injected() bool { return f.NotInjected == "" }

// injectedFaults counts the faults of fs that took.
func injectedFaults(fs []FaultRecord) int {
	n := 0
	for _, f := range fs {
		if f.Injected() {
			n++
		}
	}
	return n
}

// Failed reports whether the run found a violation. Faults not injected
// do not fail it; a broken harness is Run's error, not the report's.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Harassment counts the writes aimed at sandboxes being deleted.
type Harassment struct {
	LabelFlips        int `json:"label_flips"`
	StatusWrites      int `json:"status_writes"`
	IdenticalRewrites int `json:"identical_rewrites"`
}

// Summary aggregates the history.
type Summary struct {
	Ops              int            `json:"ops"`
	OpsByKind        map[string]int `json:"ops_by_kind"`
	ErrorsByCode     map[string]int `json:"errors_by_code"`
	DeletesUnderFire int            `json:"deletes_under_writers"`
	Faults           map[string]int `json:"faults"`
	// FaultsNotInjected counts, by fault, those whose injection failed
	// every attempt (FaultRecord.NotInjected).
	FaultsNotInjected map[string]int `json:"faults_not_injected,omitempty"`
	LatencyMS         map[string]Pct `json:"latency_ms"`
	// During faults, by op kind.
	FaultLatencyMS map[string]Pct `json:"fault_latency_ms_by_kind"`
	// On a cluster: faults by node, failover and fence times, and the
	// longest convergence after a scenario's faults healed.
	FaultsByNode map[string]int `json:"faults_by_node,omitempty"`
	FailoverMS   Pct            `json:"failover_ms"`
	WorstFence   time.Duration  `json:"worst_fence_ns,omitempty"`
	WorstFenceAt string         `json:"worst_fence_node,omitempty"`
	Convergence  time.Duration  `json:"longest_convergence_ns,omitempty"`
	// Egress sums the egress scenarios' figures (nil: none ran).
	Egress *EgressFigures `json:"egress,omitempty"`
}

// Pct is a latency pair.
type Pct struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	N   int     `json:"n"`
}

func reportConfig(c Config) map[string]any {
	return map[string]any{"scenarios": c.Scenarios, "duration": c.Duration.String(), "clients": c.Clients,
		"deleting_bound": c.DeletingBound.String(), "op_timeout": c.OpTimeout.String(), "endpoint": c.Endpoint, "cluster": c.Cluster, "workers": c.Workers}
}

func pct(ds []time.Duration) Pct {
	if len(ds) == 0 {
		return Pct{}
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(float64(len(ds))*p))].Microseconds()) / 1000
	}
	return Pct{P50: at(0.5), P99: at(0.99), N: len(ds)}
}

func (r *Report) summarize(ops []Op) {
	s := Summary{OpsByKind: map[string]int{}, ErrorsByCode: map[string]int{}, Faults: map[string]int{}, FaultsNotInjected: map[string]int{}, LatencyMS: map[string]Pct{},
		FaultLatencyMS: map[string]Pct{}, FaultsByNode: map[string]int{}}
	var calm, faulty []time.Duration
	byKind := map[string][]time.Duration{}
	for _, o := range ops {
		s.Ops++
		s.OpsByKind[o.Kind]++
		if !o.ok() {
			s.ErrorsByCode[o.Code]++
		}
		d := time.Duration(o.Return - o.Call)
		if o.DuringFault {
			faulty = append(faulty, d)
			byKind[o.Kind] = append(byKind[o.Kind], d)
		} else {
			calm = append(calm, d)
		}
	}
	var failovers []time.Duration
	for _, sc := range r.Scenarios {
		for _, f := range sc.Faults {
			if !f.Injected() {
				s.FaultsNotInjected[f.Name]++
				continue
			}
			s.Faults[f.Name]++
			if f.Target != "" {
				node, _, _ := strings.Cut(f.Target, " ")
				for _, n := range strings.Split(node, ",") {
					s.FaultsByNode[n]++
				}
			}
			if f.Failover > 0 {
				failovers = append(failovers, f.Failover)
			}
		}
		if c := sc.Cluster; c != nil && c.Fencing.Worst > s.WorstFence {
			s.WorstFence, s.WorstFenceAt = c.Fencing.Worst, c.Fencing.WorstNode
		}
		if c := sc.Convergence; c != nil && c.After > s.Convergence {
			s.Convergence = c.After
		}
		if eg := sc.Egress; eg != nil {
			if s.Egress == nil {
				s.Egress = &EgressFigures{}
			}
			s.Egress.add(*eg)
			if eg.Skipped != "" {
				s.Egress.Skipped = eg.Skipped
			}
		}
		if sc.Harassment.LabelFlips+sc.Harassment.StatusWrites+sc.Harassment.IdenticalRewrites > 0 {
			for _, o := range scenarioOps(ops, sc.Name) {
				if strings.HasPrefix(o.Kind, "sandbox-delete") && o.ok() {
					s.DeletesUnderFire++
				}
			}
		}
	}
	s.LatencyMS["without_faults"] = pct(calm)
	s.LatencyMS["during_faults"] = pct(faulty)
	for k, ds := range byKind {
		s.FaultLatencyMS[k] = pct(ds)
	}
	s.FailoverMS = pct(failovers)
	r.Summary = s
}

// WriteSummary prints the human summary table.
func (r *Report) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\t(replay: shoal-lab chaos run --seed %d --scenario %s)\n", r.Seed, r.Seed, strings.Join(r.Config["scenarios"].([]string), ","))
	fmt.Fprintf(tw, "duration\t%s\n", r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(tw, "ops\t%d\n", r.Summary.Ops)
	fmt.Fprintf(tw, "deletes under writers\t%d\n", r.Summary.DeletesUnderFire)
	fmt.Fprintln(tw, "\nSCENARIO\tOPS\tFAULTS\tLABEL FLIPS\tSTATUS WRITES\tREWRITES\tFENCED WRITES\tLINEARIZABILITY\tVIOLATIONS")
	for _, s := range r.Scenarios {
		h := s.Harassment
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\n", s.Name, s.Ops, injectedFaults(s.Faults), h.LabelFlips, h.StatusWrites, h.IdenticalRewrites, s.FencedWrites, s.Linearizability, len(s.Violations))
	}
	fmt.Fprintln(tw, "\nOP\tCOUNT")
	for _, k := range sortedKeys(r.Summary.OpsByKind) {
		fmt.Fprintf(tw, "%s\t%d\n", k, r.Summary.OpsByKind[k])
	}
	fmt.Fprintln(tw, "\nERROR CODE\tCOUNT")
	for _, k := range sortedKeys(r.Summary.ErrorsByCode) {
		fmt.Fprintf(tw, "%s\t%d\n", k, r.Summary.ErrorsByCode[k])
	}
	fmt.Fprintln(tw, "\nFAULT\tINJECTED\tNOT INJECTED")
	names := map[string]bool{}
	for k := range r.Summary.Faults {
		names[k] = true
	}
	for k := range r.Summary.FaultsNotInjected {
		names[k] = true
	}
	for _, k := range sortedKeys(names) {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", k, r.Summary.Faults[k], r.Summary.FaultsNotInjected[k])
	}
	fmt.Fprintln(tw, "\nLATENCY\tP50 ms\tP99 ms\tOPS")
	for _, k := range []string{"without_faults", "during_faults"} {
		p := r.Summary.LatencyMS[k]
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\n", strings.ReplaceAll(k, "_", " "), p.P50, p.P99, p.N)
	}
	if len(r.Summary.FaultLatencyMS) > 0 {
		fmt.Fprintln(tw, "\nDURING FAULTS\tP50 ms\tP99 ms\tOPS")
		for _, k := range sortedKeys(r.Summary.FaultLatencyMS) {
			p := r.Summary.FaultLatencyMS[k]
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\n", k, p.P50, p.P99, p.N)
		}
	}
	if len(r.Summary.FaultsByNode) > 0 {
		fmt.Fprintln(tw, "\nNODE\tFAULTS")
		for _, k := range sortedKeys(r.Summary.FaultsByNode) {
			fmt.Fprintf(tw, "%s\t%d\n", k, r.Summary.FaultsByNode[k])
		}
		fmt.Fprintln(tw, "\nCLUSTER\t")
		if f := r.Summary.FailoverMS; f.N > 0 {
			fmt.Fprintf(tw, "leader kill → next leader's first fenced write\tp50 %.0f ms, p99 %.0f ms (%d kills)\n", f.P50, f.P99, f.N)
		}
		fmt.Fprintf(tw, "worst fence time (lease expiry → containers paused)\t%s %s\n", r.Summary.WorstFence.Round(time.Millisecond), r.Summary.WorstFenceAt)
		fmt.Fprintf(tw, "longest convergence after the faults healed\t%s\n", r.Summary.Convergence.Round(time.Millisecond))
	}
	if eg := r.Summary.Egress; eg != nil {
		fmt.Fprintln(tw, "\nEGRESS\t")
		if eg.Skipped != "" {
			fmt.Fprintf(tw, "skipped\t%s\n", eg.Skipped)
		}
		fmt.Fprintf(tw, "sandbox incarnations / policy versions / policy writes acknowledged\t%d / %d / %d\n", eg.Incarnations, eg.Versions, eg.PolicyWrites)
		fmt.Fprintf(tw, "attempts from inside the sandboxes\t%d\n", eg.Attempts)
		fmt.Fprintf(tw, "admitted / refused / timed out / exec failed\t%d / %d / %d / %d\n", eg.Admitted, eg.Refused, eg.TimedOut, eg.Unknown)
		fmt.Fprintf(tw, "refused as required (16) / required\t%d / %d\n", eg.RefusedAsRequired, eg.Required)
		if eg.Unchecked > 0 {
			fmt.Fprintf(tw, "not checked (incarnation unknown)\t%d\n", eg.Unchecked)
		}
	}
	var notInjected []string
	for _, sc := range r.Scenarios {
		for _, f := range sc.Faults {
			if !f.Injected() {
				notInjected = append(notInjected, fmt.Sprintf("  %s %s (%d attempts, at %s): %s", sc.Name, f.Name, f.Attempts, clock(f.At), f.NotInjected))
			}
		}
	}
	fmt.Fprintf(tw, "\nFAULTS NOT INJECTED\t%d\n", len(notInjected))
	tw.Flush()
	for _, l := range notInjected {
		fmt.Fprintln(w, l)
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nVIOLATIONS\t%d\n", len(r.Violations))
	tw.Flush()
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  [%s] %s: %s\n", v.Invariant, v.Scenario, v.Detail)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (r *Report) write(dir string, ops []Op) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	hb, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), hb, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "summary.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	r.WriteSummary(f)
	return nil
}
