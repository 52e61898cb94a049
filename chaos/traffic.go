package chaos

import (
	"context"
	"fmt"
	"github.com/google/uuid"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Pools of names the clients contend on.
const (
	sandboxPool  = 6
	providerPool = 3
)

// opTimeout bounds every client call (Config.OpTimeout); a timed-out
// call is ambiguous.
func (t *traffic) opTimeout() time.Duration { return t.e.cfg.OpTimeout }

type weighted struct {
	kind   string
	weight int
}

var mix = []weighted{
	{"sandbox-create", 14}, {"sandbox-get", 14}, {"sandbox-list", 4}, {"sandbox-label", 16},
	{"sandbox-attach", 6}, {"sandbox-detach", 4}, {"sandbox-delete", 8}, {"sandbox-delete-wait", 6},
	{"sandbox-watch", 2}, {"provider-create", 10}, {"provider-update", 6}, {"provider-delete", 10},
}

// runStateMix is mix with stop and start (scenario stop-start): they race
// the label writers, the contenders and deletes on the same names.
var runStateMix = append(slices.Clone(mix), weighted{"sandbox-stop", 12}, weighted{"sandbox-start", 12})

var raceMix = []weighted{
	{"sandbox-create", 20}, {"sandbox-attach", 20}, {"sandbox-detach", 6}, {"sandbox-delete", 10},
	{"provider-create", 20}, {"provider-delete", 24},
}

func pick(rng *rand.Rand, m []weighted) string {
	total := 0
	for _, w := range m {
		total += w.weight
	}
	n := rng.IntN(total)
	for _, w := range m {
		if n < w.weight {
			return w.kind
		}
		n -= w.weight
	}
	return m[0].kind
}

// traffic drives one scenario's clients.
type traffic struct {
	e    *env
	h    *history
	scn  string
	race bool
	// runState adds stop and start to the mix.
	runState bool

	// targets are sandbox names being deleted right now: the harassers
	// aim their writes at them.
	mu      sync.Mutex
	targets map[string]int

	// rewrites, labelFlips and statusWrites count the harassers' writes.
	statMu                             sync.Mutex
	rewrites, labelFlips, statusWrites int

	// seqs numbers each writer's writes, so that no two writes store the
	// same value (writes.go).
	seqMu sync.Mutex
	seqs  map[int]int

	// start and focusSeed place the contenders' focus (focus).
	start     time.Time
	focusSeed uint64
}

func (t *traffic) sandboxName(rng *rand.Rand) string {
	return fmt.Sprintf("%s-sb%d", t.scn, rng.IntN(sandboxPool))
}

func (t *traffic) providerName(rng *rand.Rand) string {
	return fmt.Sprintf("%s-p%d", t.scn, rng.IntN(providerPool))
}

func (t *traffic) target(name string, delta int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.targets[name] += delta
	if t.targets[name] <= 0 {
		delete(t.targets, name)
	}
}

func (t *traffic) randomTarget(rng *rand.Rand) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.targets) == 0 {
		return "", false
	}
	i := rng.IntN(len(t.targets))
	for n := range t.targets {
		if i == 0 {
			return n, true
		}
		i--
	}
	return "", false
}

func (t *traffic) nextSeq(writer int) int {
	t.seqMu.Lock()
	defer t.seqMu.Unlock()
	if t.seqs == nil {
		t.seqs = map[int]int{}
	}
	t.seqs[writer]++
	return t.seqs[writer]
}

// contenders are the writers aimed together at the focus: two label
// writers through the API, whose updates race in the node's update loop,
// and a status writer through the store, as the node's status sync writes.
var contenders = []string{"sandbox-label", "sandbox-label", "sandbox-status"}

// focusPeriod is how long the contenders stay on one sandbox name.
const focusPeriod = time.Second

// focus is the pool name the contenders write to now: one name for all of
// them at a time, so that their read-modify-writes overlap, moving through
// the pool so that no one name's history carries all their ops.
func (t *traffic) focus() string {
	slot := uint64(time.Since(t.start) / focusPeriod)
	return fmt.Sprintf("%s-sb%d", t.scn, rand.New(rand.NewPCG(t.focusSeed, slot)).IntN(sandboxPool))
}

// client runs one client's ops until ctx ends.
func (t *traffic) client(ctx context.Context, id int, rng *rand.Rand) {
	m := mix
	switch {
	case t.race:
		m = raceMix
	case t.runState:
		m = runStateMix
	}
	for ctx.Err() == nil {
		if code := t.do(ctx, id, rng, pick(rng, m)); code == codes.Unavailable {
			// The node is down (killed, paused, cut off etcd): back off
			// instead of recording a flood of instant refusals.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(50+rng.IntN(100)) * time.Millisecond):
			}
		}
	}
}

func (t *traffic) do(ctx context.Context, id int, rng *rand.Rand, kind string) codes.Code {
	c := t.e.clientFor(id)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opTimeout())
	defer cancel()
	var op *Op
	var err error
	switch kind {
	case "sandbox-create":
		name := t.sandboxName(rng)
		var provs []string
		if rng.IntN(2) == 0 || t.race {
			provs = []string{t.providerName(rng)}
		}
		op = t.h.begin(t.scn, id, kind, name)
		var sb *shoalv1.Sandbox
		sb, err = c.CreateSandbox(cctx, &shoalv1.CreateSandboxRequest{RequestId: uuid.NewString(), Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Providers: provs}}})
		if err == nil {
			op.UID, op.Exists = sb.Meta.Uid, true
		}
	case "sandbox-get":
		op, err = t.get(cctx, id, t.sandboxName(rng))
	case "sandbox-list":
		op = t.h.begin(t.scn, id, kind, "")
		_, err = c.ListSandboxes(cctx, &shoalv1.ListSandboxesRequest{LabelSelector: labelKey(id), PageSize: 50})
	case "sandbox-label":
		op, err = t.write(cctx, nil, id, kind, t.sandboxName(rng))
	case "sandbox-attach", "sandbox-detach":
		name, p := t.sandboxName(rng), t.providerName(rng)
		op = t.h.begin(t.scn, id, kind, name)
		op.Arg = p
		if kind == "sandbox-attach" {
			_, err = c.AttachProvider(cctx, &shoalv1.AttachProviderRequest{Name: name, Provider: p})
		} else {
			_, err = c.DetachProvider(cctx, &shoalv1.DetachProviderRequest{Name: name, Provider: p})
		}
	case "sandbox-delete", "sandbox-delete-wait":
		name := t.sandboxName(rng)
		t.target(name, 1)
		defer t.target(name, -1)
		op = t.h.begin(t.scn, id, kind, name)
		_, err = c.DeleteSandbox(cctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: kind == "sandbox-delete-wait"})
	case "sandbox-watch":
		op = t.h.begin(t.scn, id, kind, "")
		wctx, wcancel := context.WithTimeout(cctx, 500*time.Millisecond)
		stream, werr := c.WatchSandboxes(wctx, &shoalv1.WatchSandboxesRequest{})
		err = werr
		for werr == nil {
			_, werr = stream.Recv()
		}
		wcancel()
		if err == nil && wctx.Err() == nil && status.Code(werr) != codes.DeadlineExceeded {
			err = werr
		}
	case "sandbox-stop", "sandbox-start":
		// No wait: the model is of the request (spec.run_state); the
		// containers are checked against it by invariant 15.
		name := t.sandboxName(rng)
		op = t.h.begin(t.scn, id, kind, name)
		if kind == "sandbox-stop" {
			_, err = c.StopSandbox(cctx, &shoalv1.StopSandboxRequest{Name: name, Grace: durationpb.New(time.Duration(rng.IntN(3)) * time.Second)})
		} else {
			_, err = c.StartSandbox(cctx, &shoalv1.StartSandboxRequest{Name: name})
		}
	case "provider-create":
		name := t.providerName(rng)
		op = t.h.begin(t.scn, id, kind, name)
		_, err = c.CreateProvider(cctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
			Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_GENERIC,
			// A credential name of its own: two providers that give the
			// same one cannot be attached to one sandbox (the API refuses
			// the clash), and the traffic means to attach several.
			Credentials: map[string]string{"CHAOS_TOKEN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")): fmt.Sprintf("secret-%d", rng.IntN(1e6))}}})
	case "provider-update":
		name := t.providerName(rng)
		op = t.h.begin(t.scn, id, kind, name)
		_, err = c.UpdateProvider(cctx, &shoalv1.UpdateProviderRequest{UpdateConfig: true, Provider: &shoalv1.Provider{
			Meta: &shoalv1.ObjectMeta{Name: name}, Config: map[string]string{"rev": fmt.Sprint(rng.IntN(1e6))}}})
	case "provider-delete":
		name := t.providerName(rng)
		op = t.h.begin(t.scn, id, kind, name)
		_, err = c.DeleteProvider(cctx, &shoalv1.DeleteProviderRequest{Name: name})
	}
	t.h.finish(op, err)
	return status.Code(err)
}

// get reads a sandbox through the API, recording its writer keys.
func (t *traffic) get(ctx context.Context, id int, name string) (*Op, error) {
	op := t.h.begin(t.scn, id, "sandbox-get", name)
	sb, err := t.e.clientFor(id).GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
	if err == nil {
		op.Exists, op.UID, op.Writes = true, sb.Meta.Uid, observedWrites(sb)
		op.Deleting = sb.Meta.DeletionTimestamp != nil
		op.Stopped = sb.GetSpec().GetRunState() == shoalv1.RunState_RUN_STATE_STOPPED
	}
	return op, err
}

// write sets writer id's own key on a sandbox to a fresh value: kind
// "sandbox-label" sets its label through the API (the node's update loop),
// "sandbox-status" its status condition through st's update loop, as the
// node's own status sync writes status. The op is begun, not finished: the
// caller records it. Store errors carry the codes the API would return.
func (t *traffic) write(ctx context.Context, st *store.Store, id int, kind, name string) (*Op, error) {
	op := t.h.begin(t.scn, id, kind, name)
	v := writeValue(id, t.nextSeq(id))
	var err error
	if kind == "sandbox-status" {
		k := statusKey(id)
		op.Arg = k + "=" + v
		_, err = st.UpdateSandbox(ctx, store.DefaultWorkspace, name, store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			setStatusWrite(sb, k, v)
			return nil
		})
		err = shoal.GRPCStatus(err)
	} else {
		k := labelKey(id)
		op.Arg = k + "=" + v
		_, err = t.e.clientFor(id).UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: name, SetLabels: map[string]string{k: v}})
	}
	return op, err
}

// lifecycle runs create provider → sandbox with it → wait-delete sandbox →
// delete provider, over and over, with unique names. The provider delete
// must succeed every time the sandbox's wait-delete returned.
func (t *traffic) lifecycle(ctx context.Context, id int) {
	for i := 0; ctx.Err() == nil; i++ {
		pn, sn := fmt.Sprintf("%s-lp%d", t.scn, i), fmt.Sprintf("%s-ls%d", t.scn, i)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*t.opTimeout())
		step := func(kind, name string, call func() error) bool {
			op := t.h.begin(t.scn, id, kind, name)
			op.Lifecycle = true
			err := call()
			t.h.finish(op, err)
			return err == nil
		}
		ok := step("provider-create", pn, func() error {
			_, err := t.e.clientFor(id).CreateProvider(cctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
				Meta: &shoalv1.ObjectMeta{Name: pn}, Type: shoalv1.ProviderType_NVIDIA, Credentials: map[string]string{"NVIDIA_API_KEY": "nvapi-chaos"}}})
			return err
		}) && step("sandbox-create", sn, func() error {
			_, err := t.e.clientFor(id).CreateSandbox(cctx, &shoalv1.CreateSandboxRequest{RequestId: uuid.NewString(), Wait: true, Sandbox: &shoalv1.Sandbox{
				Meta: &shoalv1.ObjectMeta{Name: sn}, Spec: &shoalv1.SandboxSpec{Providers: []string{pn}}}})
			return err
		})
		if ok {
			t.target(sn, 1)
			ok = step("sandbox-delete-wait", sn, func() error {
				_, err := t.e.clientFor(id).DeleteSandbox(cctx, &shoalv1.DeleteSandboxRequest{Name: sn, Wait: true})
				return err
			})
			t.target(sn, -1)
		}
		if ok {
			step("provider-delete", pn, func() error {
				_, err := t.e.clientFor(id).DeleteProvider(cctx, &shoalv1.DeleteProviderRequest{Name: pn})
				return err
			})
		}
		cancel()
		if !ok {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// harass aims writes at sandboxes being deleted: label writes through the
// API, status writes through the store, and byte-identical rewrites of the
// raw key by a separate etcd client. Label and status writes that landed,
// or may have, are recorded and modelled like any client write (each
// harasser owns its key); refusals had no effect and are left out, as the
// harassers retry in a tight loop.
func (t *traffic) harass(ctx context.Context, id int, kind string, rng *rand.Rand) {
	st := store.New(t.e.raw, store.Options{Prefix: t.e.cfg.Prefix})
	for ctx.Err() == nil {
		name, ok := t.randomTarget(rng)
		if !ok {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var landed bool
		switch kind {
		case "label", "status":
			op, err := t.write(cctx, st, id, "sandbox-"+kind, name)
			landed = err == nil
			if landed || ambiguousCode(status.Code(err).String()) {
				t.h.finish(op, err)
			}
			if status.Code(err) == codes.Unavailable {
				// No node could take it (killed, frozen, etcd electing):
				// back off, as the clients do, rather than spin.
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(50+rng.IntN(100)) * time.Millisecond):
				}
			}
		case "rewrite":
			landed = rewriteIdentical(cctx, t.e, st.SandboxKey(store.DefaultWorkspace, name))
		}
		cancel()
		if landed {
			t.statMu.Lock()
			switch kind {
			case "label":
				t.labelFlips++
			case "status":
				t.statusWrites++
			case "rewrite":
				t.rewrites++
			}
			t.statMu.Unlock()
		}
	}
}

// contend writes to the focus sandbox in a loop: each write of its own key
// (kind "sandbox-label" or "sandbox-status") is followed by a get, so that a
// write that another writer's stale read-modify-write reverted is seen
// while it is still reverted. The contenders share the focus, so their
// updates race each other and the node's: under a correct update loop they
// conflict and retry; under a broken one they revert each other's keys.
// Everything is recorded. An absent focus is created, so that the
// contenders have something to contend on most of the time.
func (t *traffic) contend(ctx context.Context, id int, kind string, rng *rand.Rand) {
	st := store.New(t.e.raw, store.Options{Prefix: t.e.cfg.Prefix})
	for ctx.Err() == nil {
		name := t.focus()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opTimeout())
		op, err := t.write(cctx, st, id, kind, name)
		t.h.finish(op, err)
		if status.Code(err) == codes.NotFound {
			op = t.h.begin(t.scn, id, "sandbox-create", name)
			sb, err := t.e.clientFor(id).CreateSandbox(cctx, &shoalv1.CreateSandboxRequest{RequestId: uuid.NewString(), Sandbox: &shoalv1.Sandbox{
				Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{}}})
			if err == nil {
				op.UID, op.Exists = sb.Meta.Uid, true
			}
			t.h.finish(op, err)
		}
		op, err = t.get(cctx, id, name)
		t.h.finish(op, err)
		cancel()
		if status.Code(err) == codes.Unavailable {
			// The node is down: back off, as the clients do.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(50+rng.IntN(100)) * time.Millisecond):
			}
		}
	}
}
