package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/egress"
	"shoal/events"
	"shoal/internal/chaosbreak"
	"shoal/store"
)

// Egress enforcement on the owning node (package egress has the design).
// For each of its sandboxes with egress rules whose container runs, the
// agent serves a unix socket (Config.Egress.Dir/UID/s) with the node's one
// egress.Proxy and keeps the sandbox's sidecar running in the container's
// network namespace (EgressRuntime.EnsureEgress); the socket is the
// sandbox's identity. The proxy checks the record's current version for
// every connection (a linearizable read: the policy that decides is never
// older than a write acknowledged before the connection began;
// egressPolicies), and refuses
// every new connection while the node does not hold its lease (it is
// fenced, and freezes its containers at the same moment). Once sidecar
// and socket are in place the agent reports the policy's version as
// status.egress_applied_version (condition Egress, event EgressApplied).
// A sandbox that is stopped, deleted, or left with no rules loses its
// socket and sidecar; a node restart closes every socket with the process
// (the sidecars then relay to nothing) until the agent serves them again.

// EgressRuntime is what egress needs of the container engine.
type EgressRuntime interface {
	EnsureEgress(ctx context.Context, s shoal.EgressSidecar) error
	RemoveEgress(ctx context.Context, uid string) error
	// EgressSidecars lists the uids of the sandboxes the node has a
	// sidecar for.
	EgressSidecars(ctx context.Context) ([]string, error)
}

// EgressConfig turns egress enforcement on (Config.Egress).
type EgressConfig struct {
	// Dir holds a directory per sandbox with rules, with the socket the
	// proxy serves it on; the engine bind-mounts it into the sidecar, so
	// it must be a path the engine sees as the node does.
	Dir     string
	Runtime EgressRuntime
	// Resolver resolves the names sandboxes ask for (nil: the node's).
	Resolver egress.Resolver
	// NodeAddrs gives the node's own addresses for the SSRF check (nil:
	// the host's interfaces, egress.HostAddrs).
	NodeAddrs func() []netip.Addr
	// Audit, if set, is told every refused and audited decision.
	Audit func(sandbox string, d egress.Decision)
}

// ConditionEgress says whether the node enforces the sandbox's egress
// policy.
const ConditionEgress = "Egress"

// Event sampling: at most egressEventBurst refused, and as many audited,
// decisions of one sandbox become events per egressEventWindow; the rest
// are counted and said in the next one.
const (
	egressEventBurst  = 5
	egressEventWindow = time.Minute
)

// egressState is the agent's egress part.
type egressState struct {
	cfg   *EgressConfig
	proxy *egress.Proxy

	mu      sync.Mutex
	served  map[string]*egressServe  // sandbox uid →
	sample  map[string]*egressSample // sandbox uid/reason →
	orphans map[string]time.Time     // uid → first seen with no live sandbox (egressResync)
	// stale is every rule Policy has read for a sandbox (uid →), kept
	// only under the chaosbreak mode stale-egress.
	stale map[string][]egress.Rule
}

// egressServe is one sandbox's socket being served.
type egressServe struct {
	sb       *shoalv1.Sandbox // meta only: workspace, name, uid
	cutBelow int64            // the spec's cut_below when it was opened
	cancel   context.CancelFunc
	done     chan struct{}

	// held is what the proxy made of the record's last version it read
	// (egressPolicies); guarded by egressState.mu.
	held heldPolicy
}

// heldPolicy is the policy of one version (mod revision) of a sandbox's
// record, or that version's lack of one.
type heldPolicy struct {
	rev int64 // 0: nothing held
	pol egress.Policy
	ok  bool
}

type egressSample struct {
	start   time.Time
	n       int
	dropped int
}

func (a *Agent) newEgress() *egressState {
	cfg := a.cfg.Egress
	if cfg == nil {
		return nil
	}
	e := &egressState{cfg: cfg, served: map[string]*egressServe{}, sample: map[string]*egressSample{}, orphans: map[string]time.Time{}, stale: map[string][]egress.Rule{}}
	nodeAddrs := cfg.NodeAddrs
	if nodeAddrs == nil {
		nodeAddrs = cachedHostAddrs()
	}
	e.proxy = &egress.Proxy{
		Policies:  egressPolicies{a},
		Resolver:  cfg.Resolver,
		NodeAddrs: nodeAddrs,
		Fenced: func() bool {
			held, _ := a.cfg.Lease.State()
			return !held
		},
		OnDecision: func(d egress.Decision) { a.egressDecision(d) },
	}
	return e
}

// cachedHostAddrs reads the host's addresses at most once a second.
func cachedHostAddrs() func() []netip.Addr {
	var mu sync.Mutex
	var at time.Time
	var addrs []netip.Addr
	return func() []netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > time.Second {
			if as, err := egress.HostAddrs(); err == nil {
				addrs, at = as, time.Now()
			}
		}
		return addrs
	}
}

// egressPolicies is the proxy's view of the policies: the policy of the
// sandbox record's current version, checked for every connection.
//
// Every connection costs one linearizable read of the record's mod
// revision (Store.SandboxRevision: the key alone, one etcd round trip):
// when it is the version whose policy is held, that policy is the current
// one; otherwise the record is read (the watch cache's fresh read, which
// returns that version or a newer one) and its policy held in turn. So a
// connection is admitted only by the policy of the record as it stood
// when the connection was taken (the chaos suite's invariant 16), without
// waiting for the watch cache on every connection: a revision made by any
// other key (an event, another sandbox's status) otherwise held each read
// until the cache's watch had caught up with it.
type egressPolicies struct{ a *Agent }

func (p egressPolicies) Policy(ctx context.Context, uid string) (egress.Policy, bool, error) {
	e := p.a.egress
	e.mu.Lock()
	s := e.served[uid]
	var held heldPolicy
	if s != nil {
		held = s.held
	}
	e.mu.Unlock()
	if s == nil {
		return egress.Policy{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev, err := p.a.cfg.Store.SandboxRevision(ctx, s.sb.Meta.Workspace, s.sb.Meta.Name)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return egress.Policy{}, false, nil
	}
	if err != nil {
		return egress.Policy{}, false, err
	}
	if held.rev == 0 || held.rev != rev {
		if held, err = p.read(ctx, s, uid, rev); err != nil {
			return egress.Policy{}, false, err
		}
	}
	if !held.ok {
		return egress.Policy{}, false, nil
	}
	pol := held.pol
	if chaosbreak.Is("stale-egress") {
		// A policy cache that never forgets a rule: what was once
		// allowed stays allowed (the chaos suite's invariant 16).
		e.mu.Lock()
		for _, r := range pol.Rules {
			if !slices.ContainsFunc(e.stale[uid], r.Equal) {
				e.stale[uid] = append(e.stale[uid], r)
			}
		}
		pol.Rules = slices.Clone(e.stale[uid])
		e.mu.Unlock()
	}
	return pol, true, nil
}

// read reads the sandbox's record, at least at rev, and holds its policy
// (Policy's slow way: the record changed since the held version).
func (p egressPolicies) read(ctx context.Context, s *egressServe, uid string, rev int64) (heldPolicy, error) {
	sb, err := p.a.cfg.Store.GetSandbox(ctx, s.sb.Meta.Workspace, s.sb.Meta.Name)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return heldPolicy{}, nil
	}
	if err != nil {
		return heldPolicy{}, err
	}
	if got := sb.GetMeta().GetResourceVersion(); got < rev {
		// The fresh read cannot be older than a read that came before it.
		return heldPolicy{}, fmt.Errorf("sandbox %s: read version %d, older than the current %d", s.sb.Meta.Name, got, rev)
	}
	h := heldPolicy{rev: sb.GetMeta().GetResourceVersion()}
	if sb.Meta.Uid == uid && sb.Meta.DeletionTimestamp == nil && store.NodeOf(sb) == p.a.cfg.Node && sb.HasEgress() {
		if h.pol, err = sb.Spec.Egress.Policy("spec.egress"); err != nil {
			return heldPolicy{}, err
		}
		h.ok = true
	}
	e := p.a.egress
	e.mu.Lock()
	if e.served[uid] == s && h.rev > s.held.rev {
		s.held = h
	}
	e.mu.Unlock()
	return h, nil
}

// syncEgress brings a sandbox's egress in line with its record and its
// container (state): served with a sidecar while it has rules and runs,
// nothing otherwise; then the applied version is reported.
func (a *Agent) syncEgress(ctx context.Context, sb *shoalv1.Sandbox, id string, state shoal.ContainerState) error {
	e := a.egress
	if e == nil {
		if !sb.HasEgress() || hasCondition(sb, ConditionEgress, "False") {
			return nil
		}
		// Not reported as applied: nothing enforces it, and nothing
		// lets the sandbox out either (it has no network).
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			store.SetCondition(st, ConditionEgress, "False", "NotEnforced",
				"this node runs without egress enforcement: the sandbox has no network at all")
		})
	}
	uid := sb.Meta.Uid
	spec := sb.GetSpec().GetEgress()
	if state.Running && state.Paused {
		// Frozen (fencing, or by hand): left as it is. A fenced node's
		// proxy refuses new connections; the thaw finds it served.
		return nil
	}
	if !sb.HasEgress() || !state.Running || id == "" {
		// Only what there is to stop: a sandbox served now, or one whose
		// rules were taken away since it was last applied. Every other
		// sync of a sandbox without egress (or stopped) asks nothing of
		// the engine; a sidecar left by a process that died is
		// egressResync's.
		if e.isServed(uid) || (sb.EgressPending() && !sb.HasEgress()) {
			if err := a.stopEgress(ctx, uid); err != nil {
				return err
			}
		}
		if sb.HasEgress() || sb.GetSpec().GetEgress().GetVersion() == 0 {
			return nil // applied once the container runs again; or never had a policy
		}
		return a.reportEgress(ctx, sb, "False", "NoRules", "no egress rules: the sandbox has no network")
	}
	if err := e.serve(a, sb, spec.GetCutBelow()); err != nil {
		return err
	}
	err := e.cfg.Runtime.EnsureEgress(ctx, shoal.EgressSidecar{UID: uid, Container: id, Dir: e.dir(uid)})
	if err != nil {
		if shoal.KindOf(err) != shoal.KindFailedPrecondition {
			return fmt.Errorf("egress sidecar of %s: %w", sb.Meta.Name, err)
		}
		// What retrying will not mend (no sidecar image, a container
		// with a network of its own): said in the condition, served by
		// nothing, tried again at the next resync.
		e.stopServe(uid)
		if conditionIs(sb, ConditionEgress, "False", "NotEnforced") {
			return nil
		}
		return a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
			store.SetCondition(st, ConditionEgress, "False", "NotEnforced", err.Error())
		})
	}
	msg := fmt.Sprintf("egress policy version %d enforced (%d rules, %s)", spec.GetVersion(), len(spec.GetRules()), modeName(spec.GetMode()))
	return a.reportEgress(ctx, sb, "True", "Enforced", msg)
}

func modeName(m shoalv1.EgressMode) string {
	if m == shoalv1.EgressMode_EGRESS_MODE_AUDIT {
		return "audit"
	}
	return "enforce"
}

// reportEgress records that the node applies the sandbox's current
// policy version, once per version.
func (a *Agent) reportEgress(ctx context.Context, sb *shoalv1.Sandbox, status, reason, msg string) error {
	v := sb.GetSpec().GetEgress().GetVersion()
	if sb.GetStatus().GetEgressAppliedVersion() >= v && conditionIs(sb, ConditionEgress, status, reason) {
		return nil
	}
	announce := sb.GetStatus().GetEgressAppliedVersion() < v
	err := a.setStatus(ctx, sb, func(st *shoalv1.SandboxStatus) {
		st.EgressAppliedVersion = max(st.EgressAppliedVersion, v)
		store.SetCondition(st, ConditionEgress, status, reason, msg)
	})
	if err == nil && announce {
		a.record(sb, events.Event{Reason: events.EgressApplied, Message: msg,
			Details: map[string]string{"version": fmt.Sprint(v)}})
	}
	return err
}

// listenUnix listens on a unix socket at path. A path longer than a
// socket address holds (a deep --egress-dir) is reached through its
// directory's descriptor, /proc/self/fd/N/NAME, which the kernel resolves
// to the same file; dir is that directory, to close once the listener is
// closed (nil for a short path).
func listenUnix(path string) (ln net.Listener, dir *os.File, err error) {
	if len(path) <= maxSocketPath {
		ln, err = net.Listen("unix", path)
		return ln, nil, err
	}
	dir, err = os.Open(filepath.Dir(path))
	if err != nil {
		return nil, nil, err
	}
	ln, err = net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
	if err != nil {
		dir.Close()
		return nil, nil, err
	}
	return ln, dir, nil
}

func closeDir(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// maxSocketPath is the longest path a unix socket may have on Linux
// (sun_path's 108 bytes, one for the NUL).
const maxSocketPath = 107

// isServed reports whether a sandbox's socket is being served.
func (e *egressState) isServed(uid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[uid] != nil
}

// dir is a sandbox's socket directory.
func (e *egressState) dir(uid string) string { return filepath.Join(e.cfg.Dir, uid) }

// serve serves a sandbox's socket, opened again (cutting every open
// connection) when the spec asks connections to be cut since it was
// opened.
func (e *egressState) serve(a *Agent, sb *shoalv1.Sandbox, cutBelow int64) error {
	uid := sb.Meta.Uid
	e.mu.Lock()
	s := e.served[uid]
	e.mu.Unlock()
	if s != nil && s.cutBelow >= cutBelow {
		return nil
	}
	if s != nil {
		e.stopServe(uid)
	}
	dir := e.dir(uid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	path := filepath.Join(dir, "s")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("egress: %w", err)
	}
	ln, dirf, err := listenUnix(path)
	if err != nil {
		return fmt.Errorf("egress: listen for sandbox %s: %w", sb.Meta.Name, err)
	}
	// The sidecar runs as nobody: the socket is nobody's alone where the
	// node may give it away (it runs as root), else open to every local
	// user (who could then speak as this sandbox).
	mode := os.FileMode(0o600)
	if err := os.Chown(path, sidecarUID, sidecarUID); err != nil {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		closeDir(dirf)
		return fmt.Errorf("egress: %w", err)
	}
	ctx, cancel := context.WithCancel(a.life)
	s = &egressServe{sb: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: sb.Meta.Workspace, Name: sb.Meta.Name, Uid: uid},
		Spec: &shoalv1.SandboxSpec{Node: a.cfg.Node}}, cutBelow: cutBelow, cancel: cancel, done: make(chan struct{})}
	e.mu.Lock()
	e.served[uid] = s
	e.mu.Unlock()
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		defer close(s.done)
		defer closeDir(dirf) // after Serve closed (and unlinked) the socket
		if err := e.proxy.Serve(ctx, ln, uid); err != nil && ctx.Err() == nil {
			a.log.Warn("egress: serving a sandbox's socket failed; it is served again at its next sync", "sandbox", sb.Meta.Name, "err", err)
			e.mu.Lock()
			if e.served[uid] == s {
				delete(e.served, uid)
			}
			e.mu.Unlock()
			a.queue.Add(item{sb.Meta.Workspace, sb.Meta.Name})
		}
	}()
	return nil
}

// stopServe stops serving a sandbox's socket, closing its connections,
// and waits until they are closed.
func (e *egressState) stopServe(uid string) {
	e.mu.Lock()
	s := e.served[uid]
	delete(e.served, uid)
	delete(e.sample, uid+"/"+string(events.EgressRefused))
	delete(e.sample, uid+"/"+string(events.EgressAudited))
	e.mu.Unlock()
	if s != nil {
		s.cancel()
		<-s.done
	}
}

// stopEgress ends a sandbox's egress: its socket, its sidecar, its
// directory.
func (a *Agent) stopEgress(ctx context.Context, uid string) error {
	e := a.egress
	if e == nil {
		return nil
	}
	e.stopServe(uid)
	if err := e.cfg.Runtime.RemoveEgress(ctx, uid); err != nil {
		return err
	}
	return e.removeDir(uid)
}

// closeEgress is stopEgress for a teardown: the runtime's Remove takes
// the sidecar with the sandbox's containers.
func (a *Agent) closeEgress(uid string) error {
	e := a.egress
	if e == nil {
		return nil
	}
	e.stopServe(uid)
	return e.removeDir(uid)
}

func (e *egressState) removeDir(uid string) error {
	if err := os.RemoveAll(e.dir(uid)); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

// egressResync removes the sidecars and socket directories of sandboxes
// this node no longer runs with rules (live: uid → whether it has rules).
// It runs with resync, from the same listing.
func (a *Agent) egressResync(ctx context.Context, live map[string]bool) {
	e := a.egress
	if e == nil {
		return
	}
	uids, err := e.cfg.Runtime.EgressSidecars(ctx)
	if err != nil {
		a.log.Warn("egress resync: list sidecars", "err", err)
		return
	}
	if ents, err := os.ReadDir(e.cfg.Dir); err == nil {
		for _, d := range ents {
			// Only what serve makes (a uid's directory): the directory
			// may hold other things, which are not the agent's.
			if d.IsDir() && looksLikeUID(d.Name()) {
				uids = append(uids, d.Name())
			}
		}
	}
	// As with containers, only what was seen gone for the orphan grace
	// goes: a sandbox made after the list was read has its directory
	// and sidecar already.
	now := time.Now()
	seen := map[string]bool{}
	var gone []string
	e.mu.Lock()
	for _, uid := range uids {
		if live[uid] || seen[uid] {
			continue
		}
		seen[uid] = true
		first, ok := e.orphans[uid]
		if !ok {
			e.orphans[uid] = now
		} else if now.Sub(first) >= a.cfg.OrphanGrace {
			gone = append(gone, uid)
		}
	}
	for uid := range e.orphans {
		if !seen[uid] {
			delete(e.orphans, uid)
		}
	}
	e.mu.Unlock()
	for _, uid := range gone {
		if err := a.stopEgress(ctx, uid); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Warn("egress resync: remove a gone sandbox's egress", "uid", uid, "err", err)
			continue
		}
		e.mu.Lock()
		delete(e.orphans, uid)
		e.mu.Unlock()
	}
}

// egressDecision counts a decision, and records refused and audited ones
// as (sampled) events and audit lines. It runs on the connection's
// goroutine and must not block: events are queued by the recorder.
func (a *Agent) egressDecision(d egress.Decision) {
	e := a.egress
	e.mu.Lock()
	s := e.served[d.Sandbox]
	e.mu.Unlock()
	if s == nil {
		return
	}
	name := s.sb.Meta.Workspace + "/" + s.sb.Meta.Name
	a.cfg.Metrics.EgressConnection(d.Verdict.String(), name)
	if d.Verdict != egress.VerdictRefuse && d.Verdict != egress.VerdictAudit {
		return
	}
	if e.cfg.Audit != nil {
		e.cfg.Audit(name, d)
	}
	reason, what := events.EgressRefused, "refused"
	if d.Verdict == egress.VerdictAudit {
		reason, what = events.EgressAudited, "admitted in audit mode; enforce would refuse"
	}
	key := d.Sandbox + "/" + string(reason) // refusals do not starve audits
	e.mu.Lock()
	if e.served[d.Sandbox] != s { // stopped meanwhile: no sample to keep
		e.mu.Unlock()
		return
	}
	sm := e.sample[key]
	now := time.Now()
	if sm == nil || now.Sub(sm.start) >= egressEventWindow {
		dropped := 0
		if sm != nil {
			dropped = sm.dropped
		}
		sm = &egressSample{start: now, dropped: dropped}
		e.sample[key] = sm
	}
	keep := sm.n < egressEventBurst
	dropped := 0
	if keep {
		sm.n++
		dropped, sm.dropped = sm.dropped, 0
	} else {
		sm.dropped++
	}
	e.mu.Unlock()
	if !keep {
		return
	}
	target := net.JoinHostPort(d.Host, fmt.Sprint(d.Port))
	msg := fmt.Sprintf("%s %s: %s (policy version %d)", target, what, d.Reason, d.PolicyVersion)
	if dropped > 0 {
		msg += fmt.Sprintf("; %d more refused or audited connections not recorded (at most %d events a minute of each kind)", dropped, egressEventBurst)
	}
	a.record(s.sb, events.Event{Reason: reason, Message: msg,
		Details: map[string]string{"host": d.Host, "port": fmt.Sprint(d.Port), "policy_version": fmt.Sprint(d.PolicyVersion)}})
}

// conditionIs reports whether the sandbox's condition typ has that
// status and reason.
func conditionIs(sb *shoalv1.Sandbox, typ, status, reason string) bool {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == typ {
			return c.Status == status && c.Reason == reason
		}
	}
	return false
}

// looksLikeUID reports whether a name has a sandbox uid's shape (a UUID:
// 36 bytes of hex digits and four dashes).
func looksLikeUID(name string) bool {
	if len(name) != 36 || strings.Count(name, "-") != 4 {
		return false
	}
	return strings.Trim(name, "0123456789abcdef-") == ""
}

// sidecarUID is the user the egress sidecar runs as (nobody).
const sidecarUID = 65534

// hasCondition reports whether the sandbox's status has the condition
// with that status.
func hasCondition(sb *shoalv1.Sandbox, typ, status string) bool {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == typ {
			return c.Status == status
		}
	}
	return false
}
