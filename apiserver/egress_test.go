package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

func egRule(host string, ports ...uint32) *shoalv1.EgressRule {
	return &shoalv1.EgressRule{Host: host, Ports: ports}
}

// Egress policies through the API: refused input names the rule and
// writes nothing; rules are stored normalised; the server sets the
// version, which moves only when the rules or the mode change (or a cut is
// asked); removing a rule that is not there is NOT_FOUND; a stale
// resource version is refused. The node is hollow: it enforces nothing,
// says so in the Egress condition, and create --wait still returns.
func TestEgressPolicyThroughAPI(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(name string, eg *shoalv1.EgressPolicy) (*shoalv1.Sandbox, error) {
		return c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Egress: eg}}})
	}
	invalid := func(what string, err error, field string) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", what, err, field)
		}
	}
	rules64 := make([]*shoalv1.EgressRule, 65)
	for i := range rules64 {
		rules64[i] = egRule("h" + strings.Repeat("a", i) + ".example.com")
	}
	for _, tc := range []struct {
		what  string
		eg    *shoalv1.EgressPolicy
		field string
	}{
		{"bad glob", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{egRule("ok.com"), egRule("*.*.com")}}, "sandbox.spec.egress.rules[1]"},
		{"port 0", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{egRule("ok.com", 443, 0)}}, "sandbox.spec.egress.rules[0].ports[1]"},
		{"port 70000", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{egRule("ok.com", 70000)}}, "sandbox.spec.egress.rules[0].ports[0]"},
		{"bad cidr", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{{Host: "ok.com", Cidrs: []string{"10.0.0.0/33"}}}}, "sandbox.spec.egress.rules[0].cidrs[0]"},
		{"numeric last label", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{egRule("300.1.1.1")}}, "sandbox.spec.egress.rules[0]"},
		{"65 rules", &shoalv1.EgressPolicy{Rules: rules64}, "sandbox.spec.egress.rules"},
		{"bad mode", &shoalv1.EgressPolicy{Mode: 7, Rules: []*shoalv1.EgressRule{egRule("ok.com")}}, "sandbox.spec.egress.mode"},
	} {
		_, err := create("bad", tc.eg)
		invalid(tc.what, err, tc.field)
	}
	if _, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "bad"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after refused creates: %v; want nothing written", err)
	}

	sb, err := create("s", &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{egRule("API.Example.com."), egRule("api.example.com", 443), egRule("10.0.0.0/8", 8080, 80, 80)}})
	if err != nil {
		t.Fatal(err)
	}
	want := &shoalv1.EgressPolicy{Version: 1, Mode: shoalv1.EgressMode_EGRESS_MODE_ENFORCE,
		Rules: []*shoalv1.EgressRule{egRule("api.example.com", 443), egRule("10.0.0.0/8", 80, 8080)}}
	if !proto.Equal(sb.GetSpec().GetEgress(), want) {
		t.Fatalf("stored policy %v; want it normalised and deduplicated: %v", sb.GetSpec().GetEgress(), want)
	}
	var cond *shoalv1.Condition
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == "Egress" {
			cond = c
		}
	}
	if cond == nil || cond.Status != "False" || cond.Reason != "NotEnforced" || sb.GetStatus().GetEgressAppliedVersion() != 0 {
		t.Errorf("a hollow node's sandbox: condition %v, applied %d; want Egress False NotEnforced, nothing applied", cond, sb.GetStatus().GetEgressAppliedVersion())
	}

	update := func(req *shoalv1.UpdateSandboxRequest) (*shoalv1.Sandbox, error) {
		req.Name = "s"
		return c.UpdateSandbox(ctx, req)
	}
	version := func(want int64, what string, sb *shoalv1.Sandbox, err error) *shoalv1.Sandbox {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if v := sb.GetSpec().GetEgress().GetVersion(); v != want {
			t.Fatalf("%s: policy version %d, want %d (%v)", what, v, want, sb.GetSpec().GetEgress())
		}
		return sb
	}
	sb, err = update(&shoalv1.UpdateSandboxRequest{SetLabels: map[string]string{"a": "b"}})
	version(1, "a label write", sb, err)
	sb, err = update(&shoalv1.UpdateSandboxRequest{AddEgressRules: []*shoalv1.EgressRule{egRule("api.example.com")}})
	version(1, "adding a rule that is there", sb, err)
	sb, err = update(&shoalv1.UpdateSandboxRequest{AddEgressRules: []*shoalv1.EgressRule{egRule("*.github.com", 443, 22)}})
	sb = version(2, "adding a rule", sb, err)
	if r := sb.GetSpec().GetEgress().GetRules(); len(r) != 3 || r[2].GetHost() != "*.github.com" {
		t.Fatalf("rules after the add: %v", r)
	}
	_, err = update(&shoalv1.UpdateSandboxRequest{RemoveEgressRules: []*shoalv1.EgressRule{egRule("nothere.com")}})
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), "remove_egress_rules[0]") {
		t.Errorf("removing an absent rule: %v; want NOT_FOUND naming remove_egress_rules[0]", err)
	}
	_, err = update(&shoalv1.UpdateSandboxRequest{AddEgressRules: []*shoalv1.EgressRule{egRule("ok.com"), egRule("**")}})
	invalid("adding a bad rule", err, "add_egress_rules[1]")
	_, err = update(&shoalv1.UpdateSandboxRequest{EgressMode: 9})
	invalid("a bad mode", err, "egress_mode")
	_, err = update(&shoalv1.UpdateSandboxRequest{ResourceVersion: sb.GetMeta().GetResourceVersion() - 1, EgressMode: shoalv1.EgressMode_EGRESS_MODE_AUDIT})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a write at a stale resource version: %v; want FAILED_PRECONDITION", err)
	}
	cur, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s"})
	if err != nil || !proto.Equal(cur.GetSpec(), sb.GetSpec()) {
		t.Fatalf("after the refused writes: %v, spec %v; want the spec unchanged: %v", err, cur.GetSpec(), sb.GetSpec())
	}
	sb, err = update(&shoalv1.UpdateSandboxRequest{ResourceVersion: cur.GetMeta().GetResourceVersion(), EgressMode: shoalv1.EgressMode_EGRESS_MODE_AUDIT})
	sb = version(3, "audit mode at the current resource version", sb, err)
	if sb.GetSpec().GetEgress().GetMode() != shoalv1.EgressMode_EGRESS_MODE_AUDIT {
		t.Errorf("mode %s, want audit", sb.GetSpec().GetEgress().GetMode())
	}
	sb, err = update(&shoalv1.UpdateSandboxRequest{EgressMode: shoalv1.EgressMode_EGRESS_MODE_AUDIT})
	version(3, "the same mode again", sb, err)
	sb, err = update(&shoalv1.UpdateSandboxRequest{CutEgressConnections: true})
	sb = version(4, "a cut", sb, err)
	if sb.GetSpec().GetEgress().GetCutBelow() != 4 {
		t.Errorf("cut_below %d after a cut, want 4", sb.GetSpec().GetEgress().GetCutBelow())
	}
	sb, err = update(&shoalv1.UpdateSandboxRequest{SetEgress: &shoalv1.EgressPolicy{Version: 99, CutBelow: 99, Rules: []*shoalv1.EgressRule{egRule("only.example.com", 8443)}}})
	sb = version(5, "set (client version ignored)", sb, err)
	if e := sb.GetSpec().GetEgress(); len(e.GetRules()) != 1 || e.GetMode() != shoalv1.EgressMode_EGRESS_MODE_ENFORCE || e.GetCutBelow() != 4 {
		t.Errorf("after set: %v; want one rule, enforce (set replaces the mode too), cut_below kept", e)
	}
	sb, err = update(&shoalv1.UpdateSandboxRequest{SetEgress: &shoalv1.EgressPolicy{}})
	sb = version(6, "set to no rules", sb, err)
	if sb.HasEgress() {
		t.Errorf("after set with no rules: %v; want no rules (no network)", sb.GetSpec().GetEgress())
	}

	// No egress at all: nothing stored, nothing versioned.
	plain, err := create("plain", nil)
	if err != nil || plain.GetSpec().GetEgress() != nil {
		t.Fatalf("a sandbox without egress: %v, %v", err, plain.GetSpec().GetEgress())
	}
	plain, err = c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "plain", SetEgress: &shoalv1.EgressPolicy{}})
	if err != nil || plain.GetSpec().GetEgress() != nil {
		t.Errorf("set to no rules of a sandbox that had none: %v, %v; want nothing written", err, plain.GetSpec().GetEgress())
	}
}
