package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/egress"
	"shoal/store"
)

// The egress scenario (issue 25): a few sandboxes with egress rules, and
// upstream HTTP servers of this process, one per destination, each
// answering with its own name and recording every request it gets. Beside
// the suite's usual traffic on the pool:
//
//   - policy writers set, add and remove the sandboxes' rules through
//     UpdateSandbox (the one update loop);
//   - a label writer writes and reads the same sandboxes, and a keeper
//     deletes one now and then (with wait) and creates it again, a new
//     incarnation with a token of its own in its environment (CHAOS_INC);
//   - clients exec wget inside the sandboxes, through the proxy, to a
//     destination each: the URL carries the attempt's id and the
//     incarnation's token, so the upstream that answers records which
//     sandbox reached it and when.
//
// Destination "anchor" is in every policy the scenario writes, d1-d3 come
// and go, "never" is in none. The checker (egresscheck.go) reads every
// version of every incarnation's policy from etcd's history, and holds
// each admitted connection to invariants 16 and 17.

// The destinations, each an upstream of its own.
const (
	egressAnchor = "anchor"
	egressNever  = "never"
)

var (
	egressToggled = []string{"d1", "d2", "d3"}
	egressDests   = append([]string{egressAnchor, egressNever}, egressToggled...)
)

const (
	// egressSandboxes is how many sandboxes with rules the scenario runs.
	egressSandboxes = 3
	// egressIncEnv is the environment variable holding an incarnation's
	// token.
	egressIncEnv = "CHAOS_INC"
	// egressAttemptTimeout bounds one wget inside a sandbox (exit 124).
	egressAttemptTimeout = 8 * time.Second
)

// EgressOp is an egress op's part of the history.
type EgressOp struct {
	// Inc is the token of the sandbox incarnation: the one a create gave
	// it, or the one an attempt's exec printed.
	Inc string `json:"inc,omitempty"`
	// Version is the policy version a create or a policy write returned.
	Version int64 `json:"version,omitempty"`
	// An attempt's id (in its URL), the destination it asked for, the
	// exit code of its exec and its outcome: answered (the upstream's
	// answer came back), refused (wget failed: a 403, a 503, nothing
	// listening), timeout, or empty when the exec itself failed.
	Attempt int64  `json:"attempt,omitempty"`
	Dest    string `json:"dest,omitempty"`
	Exit    int32  `json:"exit,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

// Attempt outcomes.
const (
	egressAnswered = "answered"
	egressRefused  = "refused"
	egressTimedOut = "timeout"
)

// egressReceipt is a request an upstream got.
type egressReceipt struct {
	Dest string // the upstream's name
	Inc  string // the token in its URL
	At   int64  // history time
}

// egressUpstreams are the destinations: HTTP servers on every address of
// this machine, reached by the sandboxes' proxies at host.
type egressUpstreams struct {
	h     *history
	dests map[string]netip.AddrPort
	srvs  []*http.Server
	wg    sync.WaitGroup

	mu       sync.Mutex
	receipts map[int64]egressReceipt // attempt →
}

func startEgressUpstreams(h *history, host netip.Addr) (*egressUpstreams, error) {
	u := &egressUpstreams{h: h, dests: map[string]netip.AddrPort{}, receipts: map[int64]egressReceipt{}}
	for _, name := range egressDests {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			u.close()
			return nil, fmt.Errorf("egress upstream %s: %w", name, err)
		}
		u.dests[name] = netip.AddrPortFrom(host, uint16(ln.Addr().(*net.TCPAddr).Port))
		srv := &http.Server{Handler: u.handler(name), ReadHeaderTimeout: 10 * time.Second}
		u.srvs = append(u.srvs, srv)
		u.wg.Go(func() { _ = srv.Serve(ln) })
	}
	return u, nil
}

// handler records each request for /a/<attempt>/<token> before it
// answers: the time of receipt comes after the proxy's decision.
func (u *egressUpstreams) handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := u.h.now()
		if rest, ok := strings.CutPrefix(r.URL.Path, "/a/"); ok {
			a, inc, _ := strings.Cut(rest, "/")
			if id, err := strconv.ParseInt(a, 10, 64); err == nil && id > 0 {
				u.mu.Lock()
				if _, dup := u.receipts[id]; !dup {
					u.receipts[id] = egressReceipt{Dest: name, Inc: inc, At: at}
				}
				u.mu.Unlock()
			}
		}
		fmt.Fprintf(w, "hello from %s\n", name)
	})
}

func (u *egressUpstreams) snapshot() map[int64]egressReceipt {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.receipts)
}

func (u *egressUpstreams) close() {
	for _, s := range u.srvs {
		s.Close()
	}
	u.wg.Wait()
}

// rule is the rule that admits destination d, and nothing else.
func (u *egressUpstreams) rule(d string) *shoalv1.EgressRule {
	ap := u.dests[d]
	return &shoalv1.EgressRule{Host: ap.Addr().String(), Ports: []uint32{uint32(ap.Port())}}
}

// egressTraffic is the egress scenario's part of the traffic.
type egressTraffic struct {
	t     *traffic
	up    *egressUpstreams
	names []string
	// from is the revision before the scenario's first egress write:
	// the checker reads every policy version from there.
	from     int64
	attempts atomic.Int64
	incs     atomic.Int64
}

// egressHost is the address the sandboxes' proxies reach this machine
// at, or why egress cannot be checked here (a cluster whose engines lack
// the sidecar's image).
func (e *env) egressHost(ctx context.Context) (netip.Addr, string, error) {
	if e.hosts != nil {
		if e.noEgress != "" {
			return netip.Addr{}, e.noEgress, nil
		}
		return e.hosts.Gateway(), "", nil
	}
	if e.owned {
		if _, err := e.docker.ImageInspect(ctx, docker.DefaultEgressImage); err != nil {
			return netip.Addr{}, "", fmt.Errorf("the egress sidecar image %s is not on the engine (make image): %w", docker.DefaultEgressImage, err)
		}
	}
	as, err := egress.HostAddrs()
	if err != nil {
		return netip.Addr{}, "", err
	}
	for _, a := range as {
		// Not loopback: a sandbox's own loopback is not the node's, and
		// the proxy refuses it anyway. The node's own addresses pass
		// when a rule names them, as the scenario's rules do.
		if a.Is4() && !a.IsLoopback() {
			return a, "", nil
		}
	}
	return netip.Addr{}, "this machine has no IPv4 address but loopback to serve the upstreams on", nil
}

// newEgressTraffic starts the upstreams; nil and a reason when egress
// cannot be checked on this system under test.
func newEgressTraffic(ctx context.Context, t *traffic) (*egressTraffic, string, error) {
	host, skip, err := t.e.egressHost(ctx)
	if err != nil || skip != "" {
		return nil, skip, err
	}
	g := &egressTraffic{t: t}
	for i := range egressSandboxes {
		g.names = append(g.names, fmt.Sprintf("%s-eg%d", t.scn, i))
	}
	resp, err := t.e.raw.Get(ctx, g.prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, "", fmt.Errorf("egress: read the revision: %w", err)
	}
	g.from = resp.Header.Revision + 1
	if g.up, err = startEgressUpstreams(t.h, host); err != nil {
		return nil, "", err
	}
	return g, "", nil
}

// prefix is the key prefix of the scenario's egress sandboxes' records
// (and of no other scenario's: names are <scenario>-eg<n>).
func (g *egressTraffic) prefix() string {
	return g.t.e.st.SandboxKey(store.DefaultWorkspace, g.t.scn+"-eg")
}

func (g *egressTraffic) close() { g.up.close() }

// start runs the egress workers until ctx ends, with writer ids from id
// on (each its own label key, as every writer's).
func (g *egressTraffic) start(ctx context.Context, wg *sync.WaitGroup, id int, rng func(uint64) *rand.Rand) {
	wg.Go(func() { g.keep(ctx, id, rng(300)) })
	wg.Go(func() { g.label(ctx, id+1, rng(301)) })
	for i := range 2 {
		wg.Go(func() { g.writePolicies(ctx, id+2+i, rng(uint64(302+i))) })
	}
	for i := range 3 {
		wg.Go(func() { g.connect(ctx, id+4+i, rng(uint64(310+i))) })
	}
}

func (g *egressTraffic) pick(rng *rand.Rand) string { return g.names[rng.IntN(len(g.names))] }

// pause waits d, or less if ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// backOff is the clients' pause after a refusal of the API.
func backOff(ctx context.Context, rng *rand.Rand) {
	pause(ctx, time.Duration(50+rng.IntN(100))*time.Millisecond)
}

// keep creates the sandboxes, then every 3-6 s deletes one (with wait)
// and creates it again.
func (g *egressTraffic) keep(ctx context.Context, id int, rng *rand.Rand) {
	for _, n := range g.names {
		if ctx.Err() != nil {
			return
		}
		g.create(ctx, id, rng, n)
	}
	for {
		pause(ctx, time.Duration(3000+rng.IntN(3000))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		n := g.pick(rng)
		g.deleteWait(ctx, id, n)
		if ctx.Err() != nil {
			return
		}
		g.create(ctx, id, rng, n)
	}
}

// someRules is the anchor and each toggled destination with even odds.
func (g *egressTraffic) someRules(rng *rand.Rand) ([]*shoalv1.EgressRule, string) {
	rules := []*shoalv1.EgressRule{g.up.rule(egressAnchor)}
	names := []string{egressAnchor}
	for _, d := range egressToggled {
		if rng.IntN(2) == 0 {
			rules = append(rules, g.up.rule(d))
			names = append(names, d)
		}
	}
	return rules, strings.Join(names, ",")
}

func (g *egressTraffic) create(ctx context.Context, id int, rng *rand.Rand, name string) {
	tok := fmt.Sprintf("i%d", g.incs.Add(1))
	rules, arg := g.someRules(rng)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.t.opTimeout())
	defer cancel()
	op := g.t.h.begin(g.t.scn, id, "sandbox-create", name)
	op.Egress = &EgressOp{Inc: tok, Dest: arg}
	sb, err := g.t.e.clientFor(id).CreateSandbox(cctx, &shoalv1.CreateSandboxRequest{RequestId: uuid.NewString(), Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name},
		Spec: &shoalv1.SandboxSpec{Env: map[string]string{egressIncEnv: tok}, Egress: &shoalv1.EgressPolicy{Rules: rules}}}})
	if err == nil {
		op.UID, op.Exists = sb.Meta.Uid, true
		op.Egress.Version = sb.GetSpec().GetEgress().GetVersion()
	}
	g.t.h.finish(op, err)
}

func (g *egressTraffic) deleteWait(ctx context.Context, id int, name string) {
	g.t.target(name, 1)
	defer g.t.target(name, -1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.t.opTimeout())
	defer cancel()
	op := g.t.h.begin(g.t.scn, id, "sandbox-delete-wait", name)
	_, err := g.t.e.clientFor(id).DeleteSandbox(cctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true})
	g.t.h.finish(op, err)
}

// label writes its label on the egress sandboxes, each write followed by
// a get (the linearizability check covers them as any sandbox: policy
// writes must not lose a label write, nor the other way round).
func (g *egressTraffic) label(ctx context.Context, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := g.pick(rng)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.t.opTimeout())
		op, err := g.t.write(cctx, nil, id, "sandbox-label", n)
		g.t.h.finish(op, err)
		op, err = g.t.get(cctx, id, n)
		g.t.h.finish(op, err)
		cancel()
		if status.Code(err) == codes.Unavailable {
			backOff(ctx, rng)
		}
		pause(ctx, time.Duration(50+rng.IntN(100))*time.Millisecond)
	}
}

// writePolicies changes a sandbox's rules every 100-400 ms: a new set
// (the anchor and some of the rest), or one rule added or removed.
func (g *egressTraffic) writePolicies(ctx context.Context, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := g.pick(rng)
		req := &shoalv1.UpdateSandboxRequest{Name: n}
		var kind, arg string
		switch r := rng.IntN(10); {
		case r < 3:
			kind = "egress-set"
			var rules []*shoalv1.EgressRule
			rules, arg = g.someRules(rng)
			req.SetEgress = &shoalv1.EgressPolicy{Rules: rules}
		case r < 6:
			kind, arg = "egress-add", egressToggled[rng.IntN(len(egressToggled))]
			req.AddEgressRules = []*shoalv1.EgressRule{g.up.rule(arg)}
		default:
			// NOT_FOUND when the rule is not there: no write.
			kind, arg = "egress-remove", egressToggled[rng.IntN(len(egressToggled))]
			req.RemoveEgressRules = []*shoalv1.EgressRule{g.up.rule(arg)}
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.t.opTimeout())
		op := g.t.h.begin(g.t.scn, id, kind, n)
		op.Arg = arg
		op.Egress = &EgressOp{}
		sb, err := g.t.e.clientFor(id).UpdateSandbox(cctx, req)
		if err == nil {
			op.UID = sb.Meta.Uid
			op.Egress.Version = sb.GetSpec().GetEgress().GetVersion()
		}
		g.t.h.finish(op, err)
		cancel()
		if status.Code(err) == codes.Unavailable {
			backOff(ctx, rng)
		}
		pause(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
	}
}

// connect makes attempts from inside the sandboxes: the anchor and
// "never" 15% of the time each, the toggled destinations the rest.
func (g *egressTraffic) connect(ctx context.Context, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		var d string
		switch r := rng.IntN(20); {
		case r < 3:
			d = egressAnchor
		case r < 6:
			d = egressNever
		default:
			d = egressToggled[rng.IntN(len(egressToggled))]
		}
		if code := g.attempt(ctx, id, g.pick(rng), d); code != codes.OK {
			backOff(ctx, rng)
		}
	}
}

// attemptScript prints the incarnation's token, then fetches $1 with the
// token appended through the proxy the sandbox is given (http_proxy).
const attemptScript = `echo "inc=$` + egressIncEnv + `"; exec wget -q -O - "$1$` + egressIncEnv + `"`

// attempt is one connection from inside sandbox name to destination d.
func (g *egressTraffic) attempt(ctx context.Context, id int, name, d string) codes.Code {
	a := g.attempts.Add(1)
	url := fmt.Sprintf("http://%s/a/%d/", g.up.dests[d], a)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.t.opTimeout())
	defer cancel()
	op := g.t.h.begin(g.t.scn, id, "egress-connect", name)
	op.Arg = d
	op.Egress = &EgressOp{Attempt: a, Dest: d}
	out, errOut, exit, err := execOutput(cctx, g.t.e.clientFor(id), name, []string{"sh", "-c", attemptScript, "sh", url}, egressAttemptTimeout)
	if err == nil {
		op.Egress.Exit = exit
		for _, l := range strings.Split(out, "\n") {
			if tok, ok := strings.CutPrefix(l, "inc="); ok {
				op.Egress.Inc = tok
				break
			}
		}
		switch {
		case exit == 0 && strings.Contains(out, "hello from "+d+"\n"):
			op.Egress.Outcome = egressAnswered
		case exit == 124:
			op.Egress.Outcome = egressTimedOut
		case exit != 0:
			op.Egress.Outcome = egressRefused
		}
		if op.Egress.Outcome != egressAnswered {
			op.Err = firstLine(errOut)
		}
	}
	g.t.h.finish(op, err)
	return status.Code(err)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// execOutput runs cmd in sandbox name: its stdout, stderr and exit code.
func execOutput(ctx context.Context, c shoalv1.ShoalClient, name string, cmd []string, timeout time.Duration) (string, string, int32, error) {
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: cmd, Timeout: durationpb.New(timeout)})
	if err != nil {
		return "", "", 0, err
	}
	var out, errOut strings.Builder
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out.String(), errOut.String(), 0, status.Error(codes.Unknown, "exec: the stream ended without an exit code")
		}
		if err != nil {
			return out.String(), errOut.String(), 0, err
		}
		switch r.GetStream() {
		case "stdout":
			out.Write(r.GetData())
		case "stderr":
			errOut.Write(r.GetData())
		}
		if r.GetExited() {
			return out.String(), errOut.String(), r.GetExitCode(), nil
		}
	}
}

// finish deletes the egress sandboxes (with wait) once the traffic is
// over, so that their sidecars go with them and none outlives the run.
func (g *egressTraffic) finish(ctx context.Context, id int) {
	var wg sync.WaitGroup
	for _, n := range g.names {
		wg.Go(func() { g.deleteWait(context.WithoutCancel(ctx), id, n) })
	}
	wg.Wait()
}

// check holds the scenario's attempts to invariants 16 and 17 against
// etcd's history of the sandboxes' policies, and checks (invariant 5)
// that no sidecar of a sandbox whose record is gone is left on an engine
// within bound.
func (g *egressTraffic) check(ctx context.Context, ops []Op, bound time.Duration) ([]Violation, EgressFigures, error) {
	incs, err := readEgressHistory(ctx, g.t.e.raw, g.prefix(), g.from)
	if err != nil {
		return nil, EgressFigures{}, fmt.Errorf("egress: read the policies' history: %w", err)
	}
	v, fig := checkEgress(g.t.scn, ops, incs, g.up.snapshot(), g.up.dests)
	v = append(v, g.checkSidecars(ctx, incs, bound)...)
	return v, fig, nil
}

// checkSidecars waits, up to bound, until no engine has a sidecar of an
// incarnation whose record is gone.
func (g *egressTraffic) checkSidecars(ctx context.Context, incs map[string]*egressInc, bound time.Duration) []Violation {
	e := g.t.e
	engines := e.engineMap()
	f := filters.NewArgs(filters.Arg("label", docker.LabelEgressFor))
	if e.hosts == nil {
		if e.nodeID == "" {
			return nil // an external node's containers cannot be told apart
		}
		engines = map[string]*client.Client{e.nodeID: e.docker}
		f.Add("label", docker.LabelNode+"="+e.nodeID)
	}
	byUID := map[string]*egressInc{}
	for _, inc := range incs {
		byUID[inc.UID] = inc
	}
	// left lists the sidecars of incarnations whose records are gone.
	left := func() ([]string, error) {
		resp, err := e.raw.Get(ctx, g.prefix(), clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		live := map[string]bool{}
		for _, kv := range resp.Kvs {
			if inc, _ := egressRecord(kv.Value); inc != nil {
				live[inc.UID] = true
			}
		}
		var out []string
		for id, c := range engines {
			cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
			if err != nil {
				return nil, err
			}
			for _, ct := range cs {
				uid := ct.Labels[docker.LabelEgressFor]
				if inc := byUID[uid]; inc != nil && !live[uid] {
					out = append(out, fmt.Sprintf("%s (sandbox %s, uid %s) on %s", short(ct.ID), inc.Name, uid, id))
				}
			}
		}
		return out, nil
	}
	deadline := time.Now().Add(bound)
	for {
		l, err := left()
		if err == nil && len(l) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return []Violation{{invNoLeftovers, g.t.scn, fmt.Sprintf("egress sidecars: could not check: %v", err)}}
			}
			return []Violation{{invNoLeftovers, g.t.scn, fmt.Sprintf("egress sidecars of deleted sandboxes left %s after the traffic: %v", bound, l)}}
		}
		pause(ctx, 250*time.Millisecond)
	}
}
