package chaos

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	shoalv1 "shoal/api/shoal/v1"
)

// The egress checker flags an admission only when it is certainly wrong:
// a connection begun after an acknowledged write removed its destination,
// received before any write that could allow it again had begun, is
// caught (16); so is one to a destination no version ever allowed (17).
// Anything a write of unknown outcome, a write still in flight, or a
// version missing from the history could explain is not.
func TestEgressChecker(t *testing.T) {
	host := netip.MustParseAddr("10.0.0.1")
	dests := map[string]netip.AddrPort{
		"anchor": netip.AddrPortFrom(host, 1000), "d1": netip.AddrPortFrom(host, 1001), "never": netip.AddrPortFrom(host, 1002)}
	rule := func(d string) *shoalv1.EgressRule {
		return &shoalv1.EgressRule{Host: dests[d].Addr().String(), Ports: []uint32{uint32(dests[d].Port())}}
	}
	with, without := []*shoalv1.EgressRule{rule("anchor"), rule("d1")}, []*shoalv1.EgressRule{rule("anchor")}
	// Version 1 (create) allows d1, 2 (acknowledged at 30) does not, 3
	// (written from 100) does again.
	incs := func(versions ...int64) map[string]*egressInc {
		inc := &egressInc{UID: "u1", Name: "eg0", Token: "i1", Versions: map[int64]egressVersion{}}
		for _, v := range versions {
			inc.Versions[v] = egressVersion{Rules: map[int64][]*shoalv1.EgressRule{1: with, 2: without, 3: with}[v]}
		}
		return map[string]*egressInc{"i1": inc}
	}
	writes := []Op{
		{Kind: "sandbox-create", Name: "eg0", Call: 0, Return: 10, Code: "OK", UID: "u1", Egress: &EgressOp{Inc: "i1", Version: 1}},
		{Kind: "egress-remove", Name: "eg0", Call: 20, Return: 30, Code: "OK", UID: "u1", Egress: &EgressOp{Version: 2}},
		{Kind: "egress-add", Name: "eg0", Call: 100, Return: 110, Code: "OK", UID: "u1", Egress: &EgressOp{Version: 3}},
		// Refused: no version of its own.
		{Kind: "egress-remove", Name: "eg0", Call: 35, Return: 36, Code: "NotFound", Egress: &EgressOp{}},
	}
	attempt := func(id, call, ret int64, dest, outcome string) Op {
		return Op{Kind: "egress-connect", Name: "eg0", Call: call, Return: ret, Code: "OK", Egress: &EgressOp{Attempt: id, Dest: dest, Inc: "i1", Outcome: outcome}}
	}
	for _, tc := range []struct {
		name     string
		extra    []Op
		receipts map[int64]egressReceipt
		versions []int64
		want     []string // invariants
		required int
		refused  int
	}{
		{name: "admitted after the acknowledged removal, before the re-add began",
			extra: []Op{attempt(1, 40, 60, "d1", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 50}},
			want: []string{invEgressLinearizable}, required: 1},
		{name: "received after the re-add began",
			extra: []Op{attempt(1, 40, 120, "d1", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 105}}},
		{name: "begun before the removal was acknowledged",
			extra: []Op{attempt(1, 25, 40, "d1", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 35}}},
		{name: "refused as required",
			extra: []Op{attempt(1, 40, 60, "d1", egressRefused)}, required: 1, refused: 1},
		{name: "refused though allowed (no safety matter)",
			extra: []Op{attempt(1, 120, 130, "d1", egressRefused)}},
		{name: "a write of unknown outcome may have allowed it again",
			extra: []Op{{Kind: "egress-add", Name: "eg0", Call: 45, Return: 9999, Code: "Unavailable", Egress: &EgressOp{}},
				attempt(1, 40, 60, "d1", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 50}}},
		{name: "a version missing from the history",
			extra: []Op{attempt(1, 40, 60, "d1", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 50}}, versions: []int64{1, 3}},
		{name: "a destination no version allows",
			extra: []Op{attempt(1, 5, 8, "never", egressAnswered)}, receipts: map[int64]egressReceipt{1: {"never", "i1", 6}},
			want: []string{invEgressWithin}, required: 1},
		{name: "the receipt, not the exec, says what was reached",
			extra: []Op{attempt(1, 40, 60, "anchor", "")}, receipts: map[int64]egressReceipt{1: {"d1", "i1", 50}},
			want: []string{invEgressLinearizable}, required: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := tc.versions
			if vs == nil {
				vs = []int64{1, 2, 3}
			}
			ops := append(slices.Clone(writes), tc.extra...)
			v, fig := checkEgress("egress", ops, incs(vs...), tc.receipts, dests)
			var got []string
			for _, x := range v {
				got = append(got, x.Invariant)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v: %v", got, tc.want, v)
			}
			if fig.Required != tc.required || fig.RefusedAsRequired != tc.refused || fig.Attempts != 1 || fig.PolicyWrites != 2 {
				t.Fatalf("figures %+v: want %d required, %d refused as required, 1 attempt, 2 policy writes", fig, tc.required, tc.refused)
			}
			for _, x := range v {
				if !strings.Contains(x.Detail, "attempt 1 from sandbox eg0") {
					t.Fatalf("detail does not name the attempt: %s", x.Detail)
				}
			}
		})
	}
}
