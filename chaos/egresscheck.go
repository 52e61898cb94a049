package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/backoff"
)

// Invariants of the egress scenario (egress.go):
//
// 16. Linearizable admission: no connection that began after a policy
// write was acknowledged is admitted by a policy older than that write.
// The proxy reads the sandbox's policy once per connection, at some
// moment between the attempt's call (before the exec is sent) and the
// upstream's receipt of the request (after the proxy admitted it). At
// that moment the policy is some version v of the incarnation's: no older
// than the newest version an acknowledged write (or create) had returned
// before the call, and no newer than the newest version that may have
// been committed by the receipt. A version cannot be committed before the
// call of the write that made it: the acknowledged writes that returned
// it, or any write of the sandbox whose outcome is unknown; versions are
// committed in order. An admitted connection to a destination that no
// version in that range allows is a violation. So is, for the figures, an
// attempt that had to be refused that way ("required"), and was
// ("refused as required").
//
// 17. No sandbox reaches a destination outside every version of its
// policy: an admitted connection to a destination that no version of the
// incarnation's policy ever allowed ("never" is in none).
//
// Admitted means the upstream got the request (its receipt names the
// attempt and the incarnation's token), whatever the exec said. The
// policy versions are etcd's: every version of every incarnation, read
// from the history of the records since the scenario began.
const (
	invEgressLinearizable = "16-egress-admission-linearizable"
	invEgressWithin       = "17-egress-within-policy"
)

// EgressFigures are the egress scenario's figures for the report.
type EgressFigures struct {
	// Skipped says why the scenario checked no egress (a cluster whose
	// engines lack the sidecar's image); empty when it did.
	Skipped string `json:"skipped,omitempty"`
	// Incarnations of the scenario's sandboxes, their policy versions
	// (etcd's), and the policy writes acknowledged.
	Incarnations int `json:"incarnations"`
	Versions     int `json:"policy_versions"`
	PolicyWrites int `json:"policy_writes_acked"`
	// Attempts from inside the sandboxes, and how they ended: admitted
	// (the upstream got them), refused, timed out, or unknown (the exec
	// failed).
	Attempts int `json:"attempts"`
	Admitted int `json:"admitted"`
	Refused  int `json:"refused"`
	TimedOut int `json:"timed_out"`
	Unknown  int `json:"unknown"`
	// Unchecked: attempts whose sandbox incarnation is not known (the
	// exec failed before it printed its token, or the sandbox had none).
	Unchecked int `json:"unchecked"`
	// Required: attempts that had to be refused (invariant 16: no
	// policy version they may have read allows their destination), and
	// of those, RefusedAsRequired were.
	Required          int `json:"required_refusals"`
	RefusedAsRequired int `json:"refused_as_required"`
}

func (f *EgressFigures) add(o EgressFigures) {
	f.Incarnations += o.Incarnations
	f.Versions += o.Versions
	f.PolicyWrites += o.PolicyWrites
	f.Attempts += o.Attempts
	f.Admitted += o.Admitted
	f.Refused += o.Refused
	f.TimedOut += o.TimedOut
	f.Unknown += o.Unknown
	f.Unchecked += o.Unchecked
	f.Required += o.Required
	f.RefusedAsRequired += o.RefusedAsRequired
}

// egressInc is one incarnation of an egress sandbox and every version of
// its policy, as etcd's history has them.
type egressInc struct {
	UID, Name, Token string
	Versions         map[int64]egressVersion
	// conflicts: one version with two rule sets.
	conflicts []string
}

type egressVersion struct {
	Rules []*shoalv1.EgressRule
	Audit bool
	Rev   int64 // the first revision that holds it
}

// allows reports whether the version admits a connection to ap: a rule
// naming its address (or a range holding it) and its port, as the
// scenario writes them. Kept apart from package egress on purpose: the
// checker must not share the matcher it checks.
func (v egressVersion) allows(ap netip.AddrPort) bool {
	if v.Audit {
		return true
	}
	for _, r := range v.Rules {
		if len(r.GetCidrs()) > 0 {
			continue // never written by the scenario
		}
		host := r.GetHost() == ap.Addr().String()
		if p, err := netip.ParsePrefix(r.GetHost()); err == nil {
			host = p.Contains(ap.Addr())
		}
		ports := r.GetPorts()
		if host && (slices.Contains(ports, uint32(ap.Port())) || len(ports) == 0 && ap.Port() == 443) {
			return true
		}
	}
	return false
}

// egressRecord decodes a record of an egress sandbox: nil for one of no
// incarnation of the scenario's (no token in its environment).
func egressRecord(b []byte) (*egressInc, *shoalv1.Sandbox) {
	var sb shoalv1.Sandbox
	if proto.Unmarshal(b, &sb) != nil {
		return nil, nil
	}
	tok := sb.GetSpec().GetEnv()[egressIncEnv]
	if tok == "" {
		return nil, nil
	}
	return &egressInc{UID: sb.GetMeta().GetUid(), Name: sb.GetMeta().GetName(), Token: tok, Versions: map[int64]egressVersion{}}, &sb
}

// readEgressHistory replays etcd's history of the records under prefix
// from revision from to now: every policy version of every incarnation,
// by token. It waits until etcd says (a progress notification) that the
// watch has delivered everything up to the revision of its first read.
func readEgressHistory(ctx context.Context, cli *clientv3.Client, prefix string, from int64) (map[string]*egressInc, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	end, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	to := end.Header.Revision
	incs := map[string]*egressInc{}
	put := func(kv []byte, rev int64) {
		inc, sb := egressRecord(kv)
		if inc == nil {
			return
		}
		if cur := incs[inc.Token]; cur != nil {
			inc = cur
		} else {
			incs[inc.Token] = inc
		}
		pol := sb.GetSpec().GetEgress()
		if pol.GetVersion() == 0 {
			return
		}
		v := egressVersion{Rules: pol.GetRules(), Audit: pol.GetMode() == shoalv1.EgressMode_EGRESS_MODE_AUDIT, Rev: rev}
		if old, ok := inc.Versions[pol.GetVersion()]; !ok {
			inc.Versions[pol.GetVersion()] = v
		} else if old.Audit != v.Audit || !slices.EqualFunc(old.Rules, v.Rules, func(a, b *shoalv1.EgressRule) bool { return proto.Equal(a, b) }) {
			inc.conflicts = append(inc.conflicts, fmt.Sprintf("version %d has rules %s at revision %d and %s at %d",
				pol.GetVersion(), describeRules(old.Rules), old.Rev, describeRules(v.Rules), rev))
		}
	}
	next := from
	for next <= to {
		err := func() error {
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			defer wcancel()
			ch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(next))
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case resp, ok := <-ch:
					if !ok {
						return errors.New("watch closed")
					}
					if err := resp.Err(); err != nil {
						return err
					}
					for _, ev := range resp.Events {
						if ev.Kv.ModRevision > to {
							next = to + 1
							return nil
						}
						if ev.Type == clientv3.EventTypePut {
							put(ev.Kv.Value, ev.Kv.ModRevision)
						}
						next = ev.Kv.ModRevision + 1
					}
					if resp.IsProgressNotify() && resp.Header.Revision >= to {
						next = to + 1
						return nil
					}
				case <-tick.C:
					_ = cli.RequestProgress(wctx)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}()
		switch {
		case err == nil:
		case errors.Is(err, rpctypes.ErrCompacted), ctx.Err() != nil:
			return nil, fmt.Errorf("revisions %d to %d: %w", from, to, err)
		default:
			// A member gone meanwhile: watch again from where it was.
			if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
	return incs, nil
}

func describeRules(rs []*shoalv1.EgressRule) string {
	var out []string
	for _, r := range rs {
		var ps []string
		for _, p := range r.GetPorts() {
			ps = append(ps, fmt.Sprint(p))
		}
		out = append(out, r.GetHost()+":"+strings.Join(ps, ","))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// isPolicyWrite: the kinds of op that change a sandbox's policy.
func isPolicyWrite(kind string) bool {
	return strings.HasPrefix(kind, "egress-") && kind != "egress-connect"
}

// checkEgress checks invariants 16 and 17 over a scenario's ops, the
// incarnations etcd's history holds (by token), the upstreams' receipts
// (by attempt) and the destinations' addresses.
func checkEgress(scn string, ops []Op, incs map[string]*egressInc, receipts map[int64]egressReceipt, dests map[string]netip.AddrPort) ([]Violation, EgressFigures) {
	var v []Violation
	fig := EgressFigures{Incarnations: len(incs)}
	byUID := map[string]*egressInc{}
	for _, inc := range incs {
		byUID[inc.UID] = inc
		fig.Versions += len(inc.Versions)
		for _, c := range inc.conflicts {
			v = append(v, Violation{invEgressLinearizable, scn, fmt.Sprintf("sandbox %s (uid %s): %s", inc.Name, inc.UID, c)})
		}
	}
	// What the writes say of each incarnation's versions: acked[uid] are
	// the acknowledged writes and creates (the version they returned);
	// unknown[name] the calls of writes whose outcome is unknown, any of
	// which may have made any version of the name's incarnations.
	type ack struct{ version, call, ret int64 }
	acked := map[string][]ack{}
	unknown := map[string][]int64{}
	createCall := map[string]int64{} // token → the create's call
	for _, o := range ops {
		write := isPolicyWrite(o.Kind) || o.Kind == "sandbox-create" && o.Egress != nil
		if !write {
			continue
		}
		if o.Kind == "sandbox-create" {
			createCall[o.Egress.Inc] = o.Call
		}
		switch {
		case o.ok() && o.Egress != nil && o.Egress.Version > 0:
			acked[o.UID] = append(acked[o.UID], ack{o.Egress.Version, o.Call, o.Return})
			if isPolicyWrite(o.Kind) {
				fig.PolicyWrites++
			}
		case o.ambiguous() && isPolicyWrite(o.Kind):
			unknown[o.Name] = append(unknown[o.Name], o.Call)
		}
	}
	// earliest[uid][v]: version v cannot have been committed before it.
	// Where no write can have made a version (none known), the version
	// before it bounds it.
	earliest := map[string]map[int64]int64{}
	for _, inc := range incs {
		vs := sortedVersions(inc)
		m := map[int64]int64{}
		var floor int64
		for i, ver := range vs {
			lb := int64(-1)
			if i == 0 {
				if c, ok := createCall[inc.Token]; ok {
					lb = c
				}
			} else {
				for _, a := range acked[inc.UID] {
					if a.version == ver && (lb < 0 || a.call < lb) {
						lb = a.call
					}
				}
				for _, c := range unknown[inc.Name] {
					if lb < 0 || c < lb {
						lb = c
					}
				}
			}
			floor = max(floor, lb) // versions are committed in order
			m[ver] = floor
		}
		earliest[inc.UID] = m
	}
	for _, o := range ops {
		if o.Kind != "egress-connect" || o.Egress == nil {
			continue
		}
		fig.Attempts++
		rc, admitted := receipts[o.Egress.Attempt]
		tok, dest, upper := o.Egress.Inc, o.Egress.Dest, o.Return
		switch {
		case admitted:
			fig.Admitted++
			tok, dest, upper = rc.Inc, rc.Dest, rc.At
		case o.Egress.Outcome == egressRefused:
			fig.Refused++
		case o.Egress.Outcome == egressTimedOut:
			fig.TimedOut++
		default:
			fig.Unknown++
		}
		inc, ok := incs[tok]
		ap, known := dests[dest]
		if !ok || !known {
			fig.Unchecked++ // the exec failed before it printed its token
			continue
		}
		vs := sortedVersions(inc)
		if len(vs) == 0 {
			continue
		}
		// The oldest version the proxy may have read: the newest one
		// acknowledged before the call.
		lo := vs[0]
		for _, a := range acked[inc.UID] {
			if a.ret < o.Call {
				lo = max(lo, a.version)
			}
		}
		// The newest: the last one that may have been committed by the
		// upper bound of the read.
		hi := lo
		for _, ver := range vs {
			if ver > hi && earliest[inc.UID][ver] <= upper {
				hi = ver
			}
		}
		allowed, missing := false, false
		for ver := lo; ver <= hi; ver++ {
			pv, ok := inc.Versions[ver]
			if !ok {
				missing = true // not in the history read: anything goes
				continue
			}
			allowed = allowed || pv.allows(ap)
		}
		if allowed || missing {
			continue
		}
		fig.Required++
		if !admitted {
			if o.Egress.Outcome == egressRefused {
				fig.RefusedAsRequired++
			}
			continue
		}
		ever := false
		for _, pv := range inc.Versions {
			ever = ever || pv.allows(ap)
		}
		what := fmt.Sprintf("attempt %d from sandbox %s (uid %s, incarnation %s) to %s (%s), called at %s, received by it at %s",
			o.Egress.Attempt, inc.Name, inc.UID, inc.Token, dest, ap, time.Duration(o.Call), time.Duration(rc.At))
		if !ever {
			v = append(v, Violation{invEgressWithin, scn, fmt.Sprintf("%s: admitted, but no version of the sandbox's policy (1-%d) ever allowed it", what, vs[len(vs)-1])})
			continue
		}
		v = append(v, Violation{invEgressLinearizable, scn, fmt.Sprintf("%s: admitted, but the proxy can only have read policy versions %d-%d then (version %d acknowledged before the call: %s), and none of them allows it",
			what, lo, hi, lo, describeRules(inc.Versions[lo].Rules))})
	}
	return v, fig
}

func sortedVersions(inc *egressInc) []int64 {
	vs := make([]int64, 0, len(inc.Versions))
	for ver := range inc.Versions {
		vs = append(vs, ver)
	}
	slices.Sort(vs)
	return vs
}
