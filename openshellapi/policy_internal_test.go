package openshellapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sandboxv1 "shoal/api/openshell/sandbox/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/egress"
)

// TestPolicyWireFacts pins the fields policy.go and config.go read and
// write by number to OpenShell's proto at commit
// 2f7fb65591ee5746217ace154afc0aa6bf1afc6d (rendered from that commit's
// descriptors, as TestWireFacts's tables are): every field of the
// messages, so that a refusal names the field it is.
func TestPolicyWireFacts(t *testing.T) {
	want := []string{
		"openshell.sandbox.v1.SandboxPolicy version = 1: uint32",
		"openshell.sandbox.v1.SandboxPolicy filesystem = 2: .openshell.sandbox.v1.FilesystemPolicy",
		"openshell.sandbox.v1.SandboxPolicy landlock = 3: .openshell.sandbox.v1.LandlockPolicy",
		"openshell.sandbox.v1.SandboxPolicy process = 4: .openshell.sandbox.v1.ProcessPolicy",
		"openshell.sandbox.v1.SandboxPolicy network_policies = 5: map<string, .openshell.sandbox.v1.NetworkPolicyRule>",
		"openshell.sandbox.v1.SandboxPolicy network_middlewares = 6: map<string, .openshell.sandbox.v1.NetworkMiddlewareConfig>",
		"openshell.sandbox.v1.NetworkPolicyRule name = 1: string",
		"openshell.sandbox.v1.NetworkPolicyRule endpoints = 2: repeated .openshell.sandbox.v1.NetworkEndpoint",
		"openshell.sandbox.v1.NetworkPolicyRule binaries = 3: repeated .openshell.sandbox.v1.NetworkBinary",
		"openshell.sandbox.v1.NetworkEndpoint host = 1: string",
		"openshell.sandbox.v1.NetworkEndpoint port = 2: uint32",
		"openshell.sandbox.v1.NetworkEndpoint protocol = 3: string",
		"openshell.sandbox.v1.NetworkEndpoint tls = 4: string",
		"openshell.sandbox.v1.NetworkEndpoint enforcement = 5: string",
		"openshell.sandbox.v1.NetworkEndpoint access = 6: string",
		"openshell.sandbox.v1.NetworkEndpoint rules = 7: repeated .openshell.sandbox.v1.L7Rule",
		"openshell.sandbox.v1.NetworkEndpoint allowed_ips = 8: repeated string",
		"openshell.sandbox.v1.NetworkEndpoint ports = 9: repeated uint32",
		"openshell.sandbox.v1.NetworkEndpoint deny_rules = 10: repeated .openshell.sandbox.v1.L7DenyRule",
		"openshell.sandbox.v1.NetworkEndpoint allow_encoded_slash = 11: bool",
		"openshell.sandbox.v1.NetworkEndpoint persisted_queries = 12: string",
		"openshell.sandbox.v1.NetworkEndpoint graphql_persisted_queries = 13: map<string, .openshell.sandbox.v1.GraphqlOperation>",
		"openshell.sandbox.v1.NetworkEndpoint graphql_max_body_bytes = 14: uint32",
		"openshell.sandbox.v1.NetworkEndpoint path = 15: string",
		"openshell.sandbox.v1.NetworkEndpoint websocket_credential_rewrite = 16: bool",
		"openshell.sandbox.v1.NetworkEndpoint request_body_credential_rewrite = 17: bool",
		"openshell.sandbox.v1.NetworkEndpoint advisor_proposed = 18: bool",
		"openshell.sandbox.v1.NetworkEndpoint credential_signing = 19: string",
		"openshell.sandbox.v1.NetworkEndpoint signing_service = 20: string",
		"openshell.sandbox.v1.NetworkEndpoint signing_region = 21: string",
		"openshell.sandbox.v1.NetworkEndpoint json_rpc_max_body_bytes = 22: uint32",
		"openshell.sandbox.v1.NetworkEndpoint mcp = 23: .openshell.sandbox.v1.McpOptions",
		"openshell.sandbox.v1.NetworkEndpoint credential_binding = 24: .openshell.sandbox.v1.NetworkCredentialBinding",
		"openshell.sandbox.v1.NetworkEndpoint allow_uninspected_credentials = 25: bool",
		"openshell.sandbox.v1.NetworkEndpoint provider_credentialed = 26: bool",
		"openshell.v1.UpdateConfigRequest name = 1: string",
		"openshell.v1.UpdateConfigRequest policy = 2: .openshell.sandbox.v1.SandboxPolicy",
		"openshell.v1.UpdateConfigRequest setting_key = 3: string",
		"openshell.v1.UpdateConfigRequest setting_value = 4: .openshell.sandbox.v1.SettingValue",
		"openshell.v1.UpdateConfigRequest delete_setting = 5: bool",
		"openshell.v1.UpdateConfigRequest global = 6: bool",
		"openshell.v1.UpdateConfigRequest merge_operations = 7: repeated .openshell.v1.PolicyMergeOperation",
		"openshell.v1.UpdateConfigRequest expected_resource_version = 8: uint64",
		"openshell.v1.UpdateConfigRequest annotations = 9: map<string, string>",
		"openshell.v1.UpdateConfigRequest workspace = 10: string",
		"openshell.v1.UpdateConfigResponse version = 1: uint32",
		"openshell.v1.UpdateConfigResponse policy_hash = 2: string",
		"openshell.v1.UpdateConfigResponse settings_revision = 3: uint64",
		"openshell.v1.UpdateConfigResponse deleted = 4: bool",
		"openshell.v1.UpdateConfigResponse annotations = 5: map<string, string>",
	}
	var got []string
	for _, m := range []struct {
		name   string
		fields []wireField
	}{
		{policyMessage, policyFields},
		{ruleMessage, ruleFields},
		{endpointMessage, endpointFields},
		{updateConfigMessage, updateConfigFields},
		{"openshell.v1.UpdateConfigResponse", updateConfigResponseFields},
	} {
		for _, f := range m.fields {
			got = append(got, fmt.Sprintf("%s %s = %d: %s", m.name, f.name, f.num, f.typ))
		}
	}
	if !slices.Equal(got, want) {
		for i := range max(len(got), len(want)) {
			g, w := "", ""
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("field %d: %q, OpenShell's is %q", i, g, w)
			}
		}
	}
}

// enc builds encodings field by field.
type enc []byte

func (e enc) str(n protowire.Number, s string) enc {
	e = protowire.AppendTag(e, n, protowire.BytesType)
	return protowire.AppendString(e, s)
}

func (e enc) num(n protowire.Number, v uint64) enc {
	e = protowire.AppendTag(e, n, protowire.VarintType)
	return protowire.AppendVarint(e, v)
}

func (e enc) sub(n protowire.Number, m enc) enc {
	e = protowire.AppendTag(e, n, protowire.BytesType)
	return protowire.AppendBytes(e, m)
}

func (e enc) policy() *sandboxv1.SandboxPolicy {
	p := &sandboxv1.SandboxPolicy{}
	p.ProtoReflect().SetUnknown([]byte(slices.Clone(e)))
	return p
}

func (e enc) endpoints(eps ...enc) enc {
	r := e
	for _, ep := range eps {
		r = r.sub(2, ep)
	}
	return r
}

// policyEnc is a SandboxPolicy of one network policy per entry (key,
// NetworkPolicyRule).
func policyEnc(entries ...any) enc {
	var p enc
	for i := 0; i+1 < len(entries); i += 2 {
		p = p.sub(5, enc(nil).str(1, entries[i].(string)).sub(2, entries[i+1].(enc)))
	}
	return p
}

// The reading of encodings that an OpenShell client may send and the
// typed tests (policy_test.go) do not: unpacked ports, ports beside port,
// a key sent twice, zero values sent, repeated messages, fields in a wire
// type not their own, bytes that do not parse.
func TestEgressOfEncodings(t *testing.T) {
	ep := enc(nil).str(1, "api.example.com")
	rule := func(eps ...enc) enc { return enc(nil).str(1, "label").endpoints(eps...) }
	enforce, audit := shoalv1.EgressMode_EGRESS_MODE_ENFORCE, shoalv1.EgressMode_EGRESS_MODE_AUDIT
	for _, c := range []struct {
		name   string
		policy enc
		want   *shoalv1.EgressPolicy
		field  string // named by the INVALID_ARGUMENT, when refused
	}{
		{name: "unpacked ports", policy: policyEnc("a", rule(ep.num(9, 80).num(9, 443))),
			want: &shoalv1.EgressPolicy{Mode: enforce, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{80, 443}}}}},
		{name: "ports win over port", policy: policyEnc("a", rule(ep.num(2, 22).sub(9, protowire.AppendVarint(protowire.AppendVarint(nil, 8080), 8443)))),
			want: &shoalv1.EgressPolicy{Mode: enforce, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{8080, 8443}}}}},
		{name: "a key sent twice: the last wins", policy: policyEnc("a", rule(ep.num(2, 1)), "a", rule(ep.num(2, 2))),
			want: &shoalv1.EgressPolicy{Mode: enforce, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{2}}}}},
		{name: "keys in order, endpoints in order", policy: policyEnc("b", rule(enc(nil).str(1, "b.example.com").num(2, 1), enc(nil).str(1, "c.example.com").num(2, 1)), "a", rule(ep.num(2, 1))),
			want: &shoalv1.EgressPolicy{Mode: enforce, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{1}}, {Host: "b.example.com", Ports: []uint32{1}}, {Host: "c.example.com", Ports: []uint32{1}}}}},
		{name: "zero values of refused fields, and version and provider_credentialed", policy: policyEnc("a", rule(ep.num(2, 443).str(6, "").num(11, 0).num(26, 1))).num(1, 9),
			want: &shoalv1.EgressPolicy{Mode: enforce, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{443}}}}},
		{name: "enforcement unset beside audit", policy: policyEnc("a", rule(ep.num(2, 443), enc(nil).str(1, "b.example.com").num(2, 443).str(5, "AUDIT"))),
			want: &shoalv1.EgressPolicy{Mode: audit, Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{443}}, {Host: "b.example.com", Ports: []uint32{443}}}}},
		{name: "no endpoints: no rules, enforced", policy: policyEnc("a", rule()),
			want: &shoalv1.EgressPolicy{Mode: enforce}},
		{name: "an empty message present", policy: policyEnc("a", rule(ep.num(2, 443).sub(23, nil))),
			field: `spec.policy.network_policies["a"].endpoints[0].mcp`},
		{name: "an unknown field", policy: policyEnc("a", rule(ep.num(2, 443).num(40, 1))),
			field: `spec.policy.network_policies["a"].endpoints[0]`},
		{name: "an unknown policy field", policy: enc(nil).num(77, 1), field: "spec.policy"},
		{name: "host as a varint", policy: policyEnc("a", rule(enc(nil).num(1, 5))),
			field: `spec.policy.network_policies["a"].endpoints[0].host`},
		{name: "truncated", policy: policyEnc("a", rule(ep.num(2, 443)))[:9], field: `spec.policy`},
		{name: "a bad map entry", policy: enc(nil).sub(5, enc(nil).num(3, 1)), field: "spec.policy.network_policies"},
		{name: "second endpoint's port", policy: policyEnc("a", rule(ep.num(2, 443), enc(nil).str(1, "b.example.com"))),
			field: `spec.policy.network_policies["a"].endpoints[1].port`},
		{name: "a port past 65535", policy: policyEnc("a", rule(ep.num(2, 1<<40))),
			field: `spec.policy.network_policies["a"].endpoints[0].port`},
		{name: "a mapped loopback host", policy: policyEnc("a", rule(enc(nil).str(1, "::ffff:127.0.0.1").num(2, 80))),
			field: `spec.policy.network_policies["a"].endpoints[0].host`},
		{name: "a range holding the metadata address", policy: policyEnc("a", rule(ep.num(2, 80).str(8, "169.254.0.0/15"))),
			field: `spec.policy.network_policies["a"].endpoints[0].allowed_ips[0]`},
		{name: "host bits set", policy: policyEnc("a", rule(ep.num(2, 80).str(8, "10.0.0.1/8"))),
			field: `spec.policy.network_policies["a"].endpoints[0].allowed_ips[0]`},
	} {
		got, err := egressOf(c.policy.policy(), "spec.policy")
		if c.field != "" {
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), c.field+": ") {
				t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", c.name, err, c.field)
			}
			continue
		}
		if err != nil || !proto.Equal(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
}

// FuzzEgressOf: no encoding makes egressOf panic, and what it accepts
// comes back from GetSandbox's form (policyOf) as the same policy, once
// shoal has normalised it as it stores it.
func FuzzEgressOf(f *testing.F) {
	ep := enc(nil).str(1, "api.example.com").num(2, 443)
	f.Add([]byte(policyEnc("a", enc(nil).endpoints(ep, enc(nil).str(1, "*.example.org").sub(9, protowire.AppendVarint(nil, 80)).str(8, "10.0.0.0/8").str(5, "audit")))))
	f.Add([]byte(policyEnc("a", enc(nil).endpoints(ep.str(4, "terminate")))))
	f.Add([]byte(enc(nil).num(1, 3).sub(2, nil)))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := egressOf(enc(b).policy(), "spec.policy")
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: not INVALID_ARGUMENT", err)
			}
			return
		}
		p, err := e.Policy("egress")
		if err != nil {
			t.Fatalf("accepted %v, which shoal refuses: %v", e, err)
		}
		// A mode without rules is no network either way (shoal gives a
		// sandbox without rules no proxy), and OpenShell's form has no
		// endpoint to carry it.
		stored := shoalv1.EgressPolicyOf(p)
		back, err := egressOf(policyOf(stored), "spec.policy")
		if err != nil {
			t.Fatalf("%v answered as a policy that is refused: %v", stored, err)
		}
		q, err := back.Policy("egress")
		if err != nil || len(p.Rules) > 0 && (q.Mode != p.Mode || !slices.EqualFunc(q.Rules, p.Rules, egress.Rule.Equal)) || len(q.Rules) != len(p.Rules) {
			t.Fatalf("%v came back as %v (%v)", p, q, err)
		}
	})
}
