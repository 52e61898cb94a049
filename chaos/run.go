package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/backoff"
)

// Run runs the configured scenarios against one environment and returns
// the report. A report with violations is not an error; err is for a run
// that could not be carried out.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Seed: cfg.Seed, Started: time.Now(), Config: reportConfig(cfg)}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	h := newHistory()
	e.hist = h
	durs := scenarioDurations(cfg.Scenarios, cfg.Duration)
	bar := newBar(cfg, durs)
	for i, name := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		sr, err := runScenario(ctx, e, h, cfg, i, name, name, durs[i], bar)
		if err != nil {
			rep.Scenarios = append(rep.Scenarios, sr)
			rep.Finished = time.Now()
			rep.summarize(h.snapshot())
			err = fmt.Errorf("scenario %s: %w", name, err)
			if cfg.ReportDir != "" {
				if werr := rep.write(cfg.ReportDir, h.snapshot()); werr != nil {
					err = errors.Join(err, werr)
				}
			}
			return rep, err
		}
		rep.Scenarios = append(rep.Scenarios, sr)
		rep.Violations = append(rep.Violations, sr.Violations...)
	}
	if bar != nil {
		_ = bar.Finish()
	}
	rep.Finished = time.Now()
	rep.summarize(h.snapshot())
	if cfg.ReportDir != "" {
		if err := rep.write(cfg.ReportDir, h.snapshot()); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

func newBar(cfg Config, durs []time.Duration) *progressbar.ProgressBar {
	if cfg.Progress == nil {
		return nil
	}
	var secs int64
	for _, d := range durs {
		secs += int64(d / time.Second)
	}
	return progressbar.NewOptions64(secs,
		progressbar.OptionSetWriter(cfg.Progress),
		progressbar.OptionSetDescription("chaos"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
	)
}

func logf(cfg Config, format string, a ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, time.Now().Format("15:04:05 ")+format+"\n", a...)
	}
}

// runScenario: traffic and faults for the scenario's share of the
// duration, then heal, wait for quiet, and check. inst names this run of
// the scenario: it prefixes every object name and labels every op, so that
// runs of the same scenario (soak cycles) have separate histories.
func runScenario(ctx context.Context, e *env, h *history, cfg Config, idx int, scenarioName, inst string, d time.Duration, bar *progressbar.ProgressBar) (ScenarioReport, error) {
	sc := scenarios[scenarioName]
	name := inst
	seed := uint64(cfg.Seed)*1000 + uint64(idx)
	rng := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
	sr := ScenarioReport{Name: name, Doc: sc.doc, Started: time.Now()}
	logf(cfg, "scenario %s: %s (%s)", name, sc.doc, d)

	terms, err := readLeaderTerms(ctx, e)
	if err != nil {
		return sr, err
	}
	t := &traffic{e: e, h: h, scn: name, race: sc.providerRace, runState: sc.runState, targets: map[string]int{},
		start: time.Now(), focusSeed: rng(200).Uint64()}
	tctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var wg sync.WaitGroup
	// Egress first: the checker reads the policies' history from the
	// revision before its first write. Its writer ids come after the
	// contenders' (below).
	var eg *egressTraffic
	egressID := cfg.Clients + 4 + len(contenders)
	if sc.egress {
		var skip string
		if eg, skip, err = newEgressTraffic(ctx, t); err != nil {
			return sr, err
		}
		if eg == nil {
			logf(cfg, "scenario %s: egress not checked: %s", name, skip)
			sr.Egress = &EgressFigures{Skipped: skip}
		} else {
			defer eg.close()
			eg.start(tctx, &wg, egressID, rng)
		}
	}
	// Writer ids: the clients 0..Clients-1, then the lifecycle client, the
	// harassers, the contenders and the egress workers; each writes its
	// own key (writes.go).
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func() { defer wg.Done(); t.client(tctx, c, rng(uint64(c)+1)) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); t.lifecycle(tctx, cfg.Clients) }()
	for i, kind := range []string{"label", "status", "rewrite"} {
		wg.Add(1)
		go func() { defer wg.Done(); t.harass(tctx, cfg.Clients+1+i, kind, rng(uint64(100+i))) }()
	}
	// The provider race has no gets to observe labels with, and its point
	// is provider deletes racing creates and attaches: no contenders there.
	if !sc.providerRace {
		for i, kind := range contenders {
			wg.Add(1)
			go func() { defer wg.Done(); t.contend(tctx, cfg.Clients+4+i, kind, rng(uint64(110+i))) }()
		}
	}
	// The attachment invariant is sampled all along, not only at the end.
	var sampleViolations []string
	var smu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for tctx.Err() == nil {
			if snap, err := e.st.Snapshot(tctx); err == nil {
				if bad := checkSnapshot(snap); len(bad) > 0 {
					smu.Lock()
					sampleViolations = append(sampleViolations, bad...)
					smu.Unlock()
				}
			}
			select {
			case <-tctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// Invariant 15 is checked all along too (runstate.go).
	var stoppedViolations []string
	if sc.runState {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tctx.Err() == nil {
				if bad, err := checkStoppedStays(tctx, e); err == nil && len(bad) > 0 {
					smu.Lock()
					stoppedViolations = append(stoppedViolations, bad...)
					smu.Unlock()
				}
				select {
				case <-tctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	// Faults, on a schedule drawn from the seed.
	var faultErr error
	var injected atomic.Int64
	var faults []Fault
	switch {
	case e.hosts != nil:
		faults = clusterFaults(e, rng(999), scenarioName)
	case sc.faults != nil:
		faults = sc.faults(e, rng(999))
	}
	// On a cluster the samplers run from before the first fault until the
	// cluster has converged after the last (invariants 8, 9, 13, 14).
	var cs *ClusterSampler
	var sampleStop context.CancelFunc
	var sampleWG sync.WaitGroup
	if e.hosts != nil {
		if cs, err = NewClusterSampler(ClusterSamplerConfig{Engines: e.engineMap(), Etcd: e.raw, Prefix: cfg.Prefix}); err != nil {
			return sr, err
		}
		var sctx context.Context
		sctx, sampleStop = context.WithCancel(ctx)
		sampleWG.Go(func() {
			if err := cs.Run(sctx); err != nil && sctx.Err() == nil {
				logf(cfg, "scenario %s: cluster sampler: %v", name, err)
			}
		})
		// Stop, then wait: on every return (two defers would run in the
		// other order, and an early return, a fault that failed, waited
		// for a sampler nothing had stopped).
		defer func() { sampleStop(); sampleWG.Wait() }()
		select {
		case <-cs.Ready():
		case <-ctx.Done():
			return sr, ctx.Err()
		}
	}
	if len(faults) > 0 {
		frng := rng(1000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			faultErr = schedule(tctx, e, h, faults, frng, &sr, &injected)
		}()
	}
	// Progress: one tick a second.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
				if bar != nil {
					ops := h.snapshot()
					errs := 0
					for _, o := range ops {
						if !o.ok() {
							errs++
						}
					}
					bar.Describe(fmt.Sprintf("%s: %d ops, %d errors, %d faults", name, len(ops), errs, injected.Load()))
					_ = bar.Add(1)
				}
			}
		}
	}()
	wg.Wait()
	if faultErr != nil {
		logf(cfg, "scenario %s: %v", name, faultErr)
		return sr, faultErr
	}
	sr.Harassment = Harassment{LabelFlips: t.labelFlips, StatusWrites: t.statusWrites, IdenticalRewrites: t.rewrites}
	if eg != nil {
		// Its sandboxes go, and their sidecars with them.
		eg.finish(ctx, egressID)
	}

	// Quiet: every fault healed; let teardown finish, then check.
	healedAt := time.Now()
	logf(cfg, "scenario %s: traffic done, checking", name)
	for _, b := range sampleViolations {
		sr.Violations = append(sr.Violations, Violation{invAttachments, name, b})
	}
	for _, b := range stoppedViolations {
		sr.Violations = append(sr.Violations, Violation{invStoppedStays, name, b})
	}
	if e.hosts != nil {
		v, fig := CheckConvergence(ctx, name, ConvergenceConfig{Etcd: e.raw, Prefix: cfg.Prefix, Engines: e.engineMap(), Bound: cfg.DeletingBound})
		sr.Violations = append(sr.Violations, v...)
		sr.Convergence = &fig
	}
	sr.Violations = append(sr.Violations, checkQuiet(ctx, e, name, cfg.DeletingBound)...)
	sr.QuietAfter = time.Since(healedAt)
	if cs != nil {
		if err := cs.Sync(ctx); err != nil {
			return sr, fmt.Errorf("cluster sampler: %w", err)
		}
		sampleStop()
		sampleWG.Wait()
		res := cs.Check(name, e.live.Windows(), clusterNodeTTL)
		sr.Violations = append(sr.Violations, res.Violations...)
		sr.Cluster = &res.Figures
	}
	if sc.runState {
		bad, err := checkStoppedStays(ctx, e)
		if err != nil {
			return sr, fmt.Errorf("invariant 15: %w", err)
		}
		for _, b := range bad {
			sr.Violations = append(sr.Violations, Violation{invStoppedStays, name, b})
		}
	}
	snap, err := e.st.Snapshot(ctx)
	if err != nil {
		return sr, err
	}
	for _, b := range checkSnapshot(snap) {
		sr.Violations = append(sr.Violations, Violation{invAttachments, name, b})
	}
	ops := scenarioOps(h.snapshot(), name)
	sr.Violations = append(sr.Violations, checkDeletes(ops)...)
	sr.Violations = append(sr.Violations, checkLifecycle(ops)...)
	sr.Violations = append(sr.Violations, checkAckedCreates(ops, snap)...)
	if eg != nil {
		v, fig, err := eg.check(ctx, ops, cfg.DeletingBound)
		if err != nil {
			return sr, err
		}
		sr.Violations = append(sr.Violations, v...)
		sr.Egress = &fig
		logf(cfg, "scenario %s: egress: %d attempts, %d admitted, %d refused as required of %d required", name, fig.Attempts, fig.Admitted, fig.RefusedAsRequired, fig.Required)
	}
	logf(cfg, "scenario %s: quiet after %s; checking linearizability", name, time.Since(healedAt).Round(time.Millisecond))
	lv, note := checkLinearizable(ops, name, cfg.ReportDir, h.now(), cfg.CheckTimeout)
	logf(cfg, "scenario %s: linearizability done", name)
	sr.Violations = append(sr.Violations, lv...)
	sr.Linearizability = note
	fv, n, err := checkFencing(ctx, e, name, terms)
	if err != nil {
		return sr, err
	}
	sr.FencedWrites = n
	sr.Violations = append(sr.Violations, fv...)
	sr.Ops = len(ops)
	sr.Finished = time.Now()
	logf(cfg, "scenario %s: %d ops, %d faults, %d violations", name, len(ops), injectedFaults(sr.Faults), len(sr.Violations))
	return sr, nil
}

func scenarioOps(all []Op, name string) []Op {
	var out []Op
	for _, o := range all {
		if o.Scenario == name {
			out = append(out, o)
		}
	}
	return out
}

// faultTimeout bounds one fault's injection, hold and healing.
const faultTimeout = 5 * time.Minute

// injectRetry is how a fault that fails to inject is tried again: the
// lab's own tools fail under load now and then (docker pause: "unable to
// freeze"), and a fault that did not take is no finding about shoal.
var injectRetry = backoff.Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2, Attempts: 3}

// harnessRetry is how the harness tries again a call of its own that
// the system under test may refuse for a while (a node not serving yet, a
// leader being elected), until the caller's context ends.
var harnessRetry = backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}

// Restorer is a Fault that can undo what a failed Inject left behind (a
// node frozen or cut off after all, one of two nodes disconnected): its
// target as it was before, serving. A Fault without it leaves nothing
// behind when Inject fails.
type Restorer interface {
	Restore(ctx context.Context) error
}

// errHarness marks an error of the lab itself, not of shoal: a target it
// could not restore. It fails the run as a violation does.
var errHarness = errors.New("broken harness")

// inject injects f under injectRetry, restoring its target after every
// failed attempt. It returns the attempts made and, when none took, the
// last injection error (the fault is then not injected and the run goes
// on). A target that cannot be restored is a broken harness: fatal.
func inject(ctx context.Context, f Fault, retry backoff.Policy, logf func(string, ...any)) (attempts int, injectErr, fatal error) {
	var last error
	err := backoff.Retry(ctx, retry, func(attempt int) error {
		attempts = attempt
		err := f.Inject(ctx)
		if err == nil {
			return nil
		}
		last = err
		logf("fault %s: injection attempt %d failed: %v", f.Name(), attempt, err)
		if r, ok := f.(Restorer); ok {
			if rerr := r.Restore(ctx); rerr != nil {
				fatal = fmt.Errorf("%w: fault %s failed to inject (%v) and its target could not be restored: %w", errHarness, f.Name(), err, rerr)
				return backoff.Permanent(err)
			}
		}
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, backoff.ErrExhausted):
		injectErr = last // the attempts are counted apart
	default:
		injectErr = err
	}
	return attempts, injectErr, fatal
}

// schedule injects faults one after another until ctx ends, and always
// heals the last one. A fault that does not inject after injectRetry is
// recorded as not injected and the schedule goes on; it returns an error
// only for a broken harness: a target not restored or a heal that failed.
// injected counts the faults so far, for the progress line (sr.Faults is
// the scheduler's alone until it returns).
func schedule(ctx context.Context, e *env, h *history, faults []Fault, rng *rand.Rand, sr *ScenarioReport, injected *atomic.Int64) error {
	o := scheduleOptions{retry: injectRetry, unit: time.Millisecond, logf: func(format string, a ...any) { logf(e.cfg, format, a...) }}
	return o.run(ctx, h, faults, rng, sr, injected)
}

// scheduleOptions are the scheduler's knobs a test turns down.
type scheduleOptions struct {
	retry backoff.Policy
	// unit scales the gaps between faults (500-2000 units).
	unit time.Duration
	logf func(string, ...any)
}

func (o scheduleOptions) run(ctx context.Context, h *history, faults []Fault, rng *rand.Rand, sr *ScenarioReport, injected *atomic.Int64) error {
	logf := o.logf
	for {
		gap := time.Duration(500+rng.IntN(1500)) * o.unit
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(gap):
		}
		f := faults[rng.IntN(len(faults))]
		hold := f.Hold(rng)
		// Faults outlive the traffic's context (a fault is always healed)
		// but not forever: a node that never serves again is an error,
		// not a hang.
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultTimeout)
		h.setFault(1)
		at := time.Now()
		attempts, ierr, fatal := inject(bg, f, o.retry, logf)
		if fatal != nil || ierr != nil {
			cancel()
			h.setFault(-1)
			if fatal != nil {
				return fatal
			}
			logf("fault %s: not injected after %d attempt(s): %v", f.Name(), attempts, ierr)
			rec := record(f, at, 0, attempts)
			rec.NotInjected = ierr.Error()
			sr.Faults = append(sr.Faults, rec)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		healAt := time.Now()
		err := f.Heal(bg)
		cancel()
		if d := time.Since(healAt); d > time.Minute {
			logf("fault %s: healing took %s", f.Name(), d.Round(time.Millisecond))
		}
		h.setFault(-1)
		sr.Faults = append(sr.Faults, record(f, at, time.Since(at), attempts))
		injected.Add(1)
		if err != nil {
			return fmt.Errorf("%w: heal %s: %w", errHarness, f.Name(), err)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// record is f's FaultRecord.
func record(f Fault, at time.Time, held time.Duration, attempts int) FaultRecord {
	rec := FaultRecord{Name: f.Name(), At: at, Held: held, Attempts: attempts}
	if t, ok := f.(interface{ Target() string }); ok {
		rec.Target = t.Target()
	}
	if fo, ok := f.(interface{ Failover() time.Duration }); ok {
		rec.Failover = fo.Failover()
	}
	return rec
}

// checkQuiet waits, up to bound, for no DELETING sandbox and no orphan
// container; what is left then is a violation.
func checkQuiet(ctx context.Context, e *env, scn string, bound time.Duration) []Violation {
	deadline := time.Now().Add(bound)
	for {
		var deleting, settling []string
		page, err := e.client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000})
		known := map[string]bool{}
		if err == nil {
			for _, sb := range page.Items {
				known[sb.Meta.Uid] = true
				if sb.Meta.DeletionTimestamp != nil {
					deleting = append(deleting, sb.Meta.Name)
				}
				if why := runStateSettling(sb); why != "" {
					settling = append(settling, sb.Meta.Name+" ("+why+")")
				}
			}
		}
		var orphans []string
		if e.nodeID == "" {
			// An external node whose id was not given (--node-id): its
			// containers cannot be told apart, so only records are checked.
		} else if cs, cerr := e.containers(ctx); cerr == nil && err == nil {
			for _, c := range cs {
				if !known[c.Labels["shoal.dev/uid"]] {
					orphans = append(orphans, c.ID[:12])
				}
			}
		} else if err == nil {
			err = cerr
		}
		if err == nil && len(deleting) == 0 && len(orphans) == 0 && len(settling) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var v []Violation
			if err != nil {
				v = append(v, Violation{invNoLeftovers, scn, fmt.Sprintf("could not check: %v", err)})
			}
			if len(deleting) > 0 {
				v = append(v, Violation{invNoLeftovers, scn, fmt.Sprintf("still DELETING %s after the faults healed: %v", bound, deleting)})
			}
			if len(orphans) > 0 {
				v = append(v, Violation{invNoLeftovers, scn, fmt.Sprintf("orphan containers %s after the faults healed: %v", bound, orphans)})
			}
			if len(settling) > 0 {
				v = append(v, Violation{invStoppedStays, scn, fmt.Sprintf("stop or start not acted on %s after the faults healed: %v", bound, settling)})
			}
			return v
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
