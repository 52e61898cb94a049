package openshellapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	sandboxv1 "shoal/api/openshell/sandbox/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// api/openshell declares neither SandboxPolicy's fields nor UpdateConfig's
// messages: these tests write and read them as an OpenShell client's
// generated code would, field number by field number (OpenShell's
// sandbox.proto and openshell.proto at the target commit).

const (
	// SandboxPolicy
	polVersion, polFilesystem, polLandlock, polProcess, polNetwork, polMiddlewares = 1, 2, 3, 4, 5, 6
	// NetworkPolicyRule
	ruleName, ruleEndpoints, ruleBinaries = 1, 2, 3
	// NetworkEndpoint
	epHost, epPort, epProtocol, epTLS, epEnforcement, epAccess, epRules, epAllowedIPs, epPorts, epDenyRules = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
	epPath, epCredentialSigning, epMCP, epCredentialBinding, epAllowUninspected                             = 15, 19, 23, 24, 25
	// UpdateConfigRequest
	ucName, ucPolicy, ucSettingKey, ucGlobal, ucMergeOperations, ucExpectedVersion, ucAnnotations, ucWorkspace = 1, 2, 3, 6, 7, 8, 9, 10
	// UpdateConfigResponse
	ucrVersion, ucrHash, ucrAnnotations = 1, 2, 5
)

// pb builds an encoding field by field.
type pb []byte

func (b pb) str(n protowire.Number, s string) pb {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func (b pb) num(n protowire.Number, v uint64) pb {
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func (b pb) msg(n protowire.Number, m pb) pb {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// entry is a map<string, message or string> entry.
func (b pb) entry(n protowire.Number, key string, value pb) pb {
	return b.msg(n, pb(nil).str(1, key).msg(2, value))
}

func (b pb) ports(ps ...uint64) pb {
	var packed []byte
	for _, p := range ps {
		packed = protowire.AppendVarint(packed, p)
	}
	return b.msg(epPorts, packed)
}

// networkPolicy is a NetworkPolicyRule.
func networkPolicy(name string, endpoints ...pb) pb {
	r := pb(nil).str(ruleName, name)
	for _, e := range endpoints {
		r = r.msg(ruleEndpoints, e)
	}
	return r
}

func (b pb) policy() *sandboxv1.SandboxPolicy {
	p := &sandboxv1.SandboxPolicy{}
	p.ProtoReflect().SetUnknown([]byte(slices.Clone(b)))
	return p
}

func (b pb) empty() *emptypb.Empty {
	e := &emptypb.Empty{}
	e.ProtoReflect().SetUnknown([]byte(slices.Clone(b)))
	return e
}

type wireField struct {
	num protowire.Number
	v   uint64
	b   []byte
}

func fields(t *testing.T, b []byte) []wireField {
	t.Helper()
	var out []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("answer does not parse: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := wireField{num: num}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("field %d: wire type %d in an answer", num, typ)
		}
		if n < 0 {
			t.Fatalf("answer does not parse: %v", protowire.ParseError(n))
		}
		b = b[n:]
		out = append(out, f)
	}
	return out
}

// osEndpoint and osPolicy are what an OpenShell client reads of the
// policy shoal answers.
type osEndpoint struct {
	Host        string
	Ports       []uint64
	AllowedIPs  []string
	Enforcement string
}

type osPolicy struct {
	Version  uint64
	Policies map[string][]osEndpoint // by key; each value's name is its key
}

func readPolicy(t *testing.T, p *sandboxv1.SandboxPolicy) *osPolicy {
	t.Helper()
	if p == nil {
		return nil
	}
	out := &osPolicy{Policies: map[string][]osEndpoint{}}
	for _, f := range fields(t, p.ProtoReflect().GetUnknown()) {
		switch f.num {
		case polVersion:
			out.Version = f.v
		case polNetwork:
			var key string
			var eps []osEndpoint
			for _, e := range fields(t, f.b) {
				if e.num == 1 {
					key = string(e.b)
					continue
				}
				for _, r := range fields(t, e.b) {
					switch r.num {
					case ruleName:
						if string(r.b) != key {
							t.Fatalf("network policy %q named %q", key, r.b)
						}
					case ruleEndpoints:
						var ep osEndpoint
						for _, x := range fields(t, r.b) {
							switch x.num {
							case epHost:
								ep.Host = string(x.b)
							case epEnforcement:
								ep.Enforcement = string(x.b)
							case epAllowedIPs:
								ep.AllowedIPs = append(ep.AllowedIPs, string(x.b))
							case epPorts:
								for b := x.b; len(b) > 0; {
									v, n := protowire.ConsumeVarint(b)
									ep.Ports, b = append(ep.Ports, v), b[n:]
								}
							default:
								t.Fatalf("endpoint field %d in an answer", x.num)
							}
						}
						eps = append(eps, ep)
					default:
						t.Fatalf("network policy field %d in an answer", r.num)
					}
				}
			}
			out.Policies[key] = eps
		default:
			t.Fatalf("policy field %d in an answer", f.num)
		}
	}
	return out
}

func updateConfig(ctx context.Context, conn *grpc.ClientConn, req pb) (version uint64, hash string, annotations map[string]string, err error) {
	resp := &emptypb.Empty{}
	if err := conn.Invoke(ctx, "/openshell.v1.OpenShell/UpdateConfig", req.empty(), resp); err != nil {
		return 0, "", nil, err
	}
	annotations = map[string]string{}
	b := resp.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		switch {
		case num == ucrVersion && typ == protowire.VarintType:
			version, n = protowire.ConsumeVarint(b)
		case num == ucrHash && typ == protowire.BytesType:
			var s []byte
			s, n = protowire.ConsumeBytes(b)
			hash = string(s)
		case num == ucrAnnotations && typ == protowire.BytesType:
			var e []byte
			e, n = protowire.ConsumeBytes(b)
			var k, v string
			for len(e) > 0 {
				en, _, m := protowire.ConsumeTag(e)
				s, m2 := protowire.ConsumeBytes(e[m:])
				if en == 1 {
					k = string(s)
				} else {
					v = string(s)
				}
				e = e[m+m2:]
			}
			annotations[k] = v
		default:
			return 0, "", nil, fmt.Errorf("UpdateConfigResponse field %d, wire type %d", num, typ)
		}
		if n < 0 {
			return 0, "", nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return version, hash, annotations, nil
}

func policyNode(t *testing.T) (*testenv.Node, openshellv1.OpenShellClient, *grpc.ClientConn) {
	t.Helper()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	conn := dial(t, n)
	return n, openshellv1.NewOpenShellClient(conn), conn
}

func egressOfSandbox(t *testing.T, ctx context.Context, n *testenv.Node, name string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// A sandbox created with OpenShell network policies has them as its shoal
// egress rules and mode, and OpenShell's GetSandbox, ListSandboxes and
// WatchSandbox answer them back; created again from what Get answered, it
// has the same rules.
func TestPolicyCreateAndGet(t *testing.T) {
	t.Parallel()
	n, oc, _ := policyNode(t)
	ctx := ctxT(t, 2*time.Minute)

	policy := pb(nil).num(polVersion, 7). // the server's: ignored
						entry(polNetwork, "internal", networkPolicy("internal",
			pb(nil).str(epHost, "registry.internal").ports(5000).str(epAllowedIPs, "10.0.5.20").str(epAllowedIPs, "10.0.6.0/24").str(epEnforcement, "audit"))).
		entry(polNetwork, "github", networkPolicy("github",
			pb(nil).str(epHost, "API.GitHub.com").num(epPort, 443).str(epEnforcement, "audit"),
			pb(nil).str(epHost, "*.githubusercontent.com").ports(443, 80).str(epProtocol, "tcp").str(epTLS, "passthrough")))
	r, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "pol", Spec: &openshellv1.SandboxSpec{Policy: policy.policy()}})
	if err != nil {
		t.Fatal(err)
	}

	// shoal's side: one rule per endpoint, network policies in key order.
	want := &shoalv1.EgressPolicy{
		Mode:    shoalv1.EgressMode_EGRESS_MODE_AUDIT,
		Version: 1,
		Rules: []*shoalv1.EgressRule{
			{Host: "api.github.com", Ports: []uint32{443}},
			{Host: "*.githubusercontent.com", Ports: []uint32{80, 443}},
			{Host: "registry.internal", Ports: []uint32{5000}, Cidrs: []string{"10.0.5.20/32", "10.0.6.0/24"}},
		},
	}
	sb := egressOfSandbox(t, ctx, n, "pol")
	if !proto.Equal(sb.Spec.Egress, want) {
		t.Fatalf("shoal's spec.egress: %v, want %v", sb.Spec.Egress, want)
	}

	// OpenShell's side: the rules as one network policy, each endpoint
	// with the sandbox's mode.
	wantOS := &osPolicy{Version: 1, Policies: map[string][]osEndpoint{"egress": {
		{Host: "api.github.com", Ports: []uint64{443}, Enforcement: "audit"},
		{Host: "*.githubusercontent.com", Ports: []uint64{80, 443}, Enforcement: "audit"},
		{Host: "registry.internal", Ports: []uint64{5000}, AllowedIPs: []string{"10.0.5.20", "10.0.6.0/24"}, Enforcement: "audit"},
	}}}
	same := func(what string, p *sandboxv1.SandboxPolicy) {
		t.Helper()
		if got := readPolicy(t, p); fmt.Sprint(got) != fmt.Sprint(wantOS) {
			t.Fatalf("%s: policy %+v, want %+v", what, got, wantOS)
		}
	}
	same("CreateSandbox's answer", r.Sandbox.Spec.Policy)
	got, err := oc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "pol"})
	if err != nil {
		t.Fatal(err)
	}
	same("GetSandbox", got.Sandbox.Spec.Policy)
	if v := got.Sandbox.Status.CurrentPolicyVersion; int64(v) != sb.Status.GetEgressAppliedVersion() {
		t.Fatalf("current_policy_version %d, shoal's applied version %d", v, sb.Status.GetEgressAppliedVersion())
	}
	list, err := oc.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
	if err != nil || len(list.Sandboxes) != 1 {
		t.Fatalf("ListSandboxes: %v %v", list, err)
	}
	same("ListSandboxes", list.Sandboxes[0].Spec.Policy)
	w, err := oc.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: got.Sandbox.Metadata.Id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	same("WatchSandbox", first.GetSandbox().GetSpec().GetPolicy())

	// Round trip: what Get answered, sent back, is the same policy.
	if _, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "pol-again", Spec: &openshellv1.SandboxSpec{Policy: got.Sandbox.Spec.Policy}}); err != nil {
		t.Fatal(err)
	}
	if again := egressOfSandbox(t, ctx, n, "pol-again"); !proto.Equal(again.Spec.Egress, want) {
		t.Fatalf("created from Get's policy: %v, want %v", again.Spec.Egress, want)
	}

	// A policy without network policies is no network (as in OpenShell):
	// the enforce policy without rules, version 1, answered as a policy
	// with none. No policy at all is no shoal policy.
	if _, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "pol-none", Spec: &openshellv1.SandboxSpec{Policy: &sandboxv1.SandboxPolicy{}}}); err != nil {
		t.Fatal(err)
	}
	if e := egressOfSandbox(t, ctx, n, "pol-none").Spec.Egress; !proto.Equal(e, &shoalv1.EgressPolicy{Mode: shoalv1.EgressMode_EGRESS_MODE_ENFORCE, Version: 1}) {
		t.Fatalf("an empty policy: spec.egress %v", e)
	}
	none, err := oc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "pol-none"})
	if err != nil {
		t.Fatal(err)
	}
	if p := readPolicy(t, none.Sandbox.Spec.Policy); p == nil || p.Version != 1 || len(p.Policies) != 0 {
		t.Fatalf("an empty policy answered as %+v", p)
	}
	if _, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "pol-unset", Spec: &openshellv1.SandboxSpec{}}); err != nil {
		t.Fatal(err)
	}
	if e := egressOfSandbox(t, ctx, n, "pol-unset").Spec.Egress; e != nil {
		t.Fatalf("no policy: spec.egress %v", e)
	}
	unset, err := oc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "pol-unset"})
	if err != nil || unset.Sandbox.Spec.Policy != nil {
		t.Fatalf("no policy answered as %v (%v)", unset.GetSandbox().GetSpec().GetPolicy(), err)
	}
}

// Every part of a policy that shoal does not enforce, and every value it
// cannot take, is INVALID_ARGUMENT naming the OpenShell field, and the
// sandbox is not created.
func TestPolicyRefusals(t *testing.T) {
	t.Parallel()
	n, oc, _ := policyNode(t)
	ctx := ctxT(t, 2*time.Minute)
	ep := func() pb { return pb(nil).str(epHost, "api.example.com").num(epPort, 443) }
	one := func(e pb) pb { return pb(nil).entry(polNetwork, "p", networkPolicy("p", e)) }
	const p0 = `spec.policy.network_policies["p"].endpoints[0]`
	for _, c := range []struct {
		field  string
		policy pb
		says   string
	}{
		{"spec.policy.filesystem", pb(nil).msg(polFilesystem, nil), "files"},
		{"spec.policy.landlock", pb(nil).msg(polLandlock, pb(nil).str(1, "best_effort")), "Landlock"},
		{"spec.policy.process", pb(nil).msg(polProcess, pb(nil).str(1, "nobody")), "user"},
		{"spec.policy.network_middlewares", pb(nil).entry(polMiddlewares, "m", pb(nil).str(1, "m")), "middlewares"},
		{`spec.policy.network_policies["p"].binaries`, pb(nil).entry(polNetwork, "p", networkPolicy("p", ep()).msg(ruleBinaries, pb(nil).str(1, "/usr/bin/curl"))), "binary"},
		{p0 + ".protocol", one(ep().str(epProtocol, "rest")), "L7"},
		{p0 + ".tls", one(ep().str(epTLS, "terminate")), "terminates none"},
		{p0 + ".access", one(ep().str(epAccess, "read-only")), "L7"},
		{p0 + ".rules", one(ep().msg(epRules, pb(nil).msg(1, pb(nil).str(1, "GET")))), "L7"},
		{p0 + ".deny_rules", one(ep().msg(epDenyRules, pb(nil).str(1, "POST"))), "L7"},
		{p0 + ".path", one(ep().str(epPath, "/graphql")), "L7"},
		{p0 + ".mcp", one(ep().msg(epMCP, nil)), "L7"},
		{p0 + ".credential_signing", one(ep().str(epCredentialSigning, "sigv4")), "credentials"},
		{p0 + ".credential_binding", one(ep().msg(epCredentialBinding, pb(nil).str(1, "gh"))), "credentials"},
		{p0 + ".allow_uninspected_credentials", one(ep().num(epAllowUninspected, 1)), "credentials"},
		{p0 + ".host", one(pb(nil).num(epPort, 443).str(epAllowedIPs, "10.0.0.0/8")), "is required"},
		{p0 + ".host", one(pb(nil).str(epHost, "bad host!").num(epPort, 443)), "not allowed in a host name"},
		{p0 + ".host", one(pb(nil).str(epHost, "169.254.169.254").num(epPort, 80)), "link-local"},
		{p0 + ".port", one(pb(nil).str(epHost, "api.example.com")), "is required"},
		{p0 + ".ports[1]", one(pb(nil).str(epHost, "api.example.com").ports(443, 70000)), "not a port"},
		{p0 + ".allowed_ips[0]", one(ep().str(epAllowedIPs, "127.0.0.1")), "loopback"},
		{p0 + ".allowed_ips[0]", one(ep().str(epAllowedIPs, "0.0.0.0/0")), "loopback"},
		{p0 + ".allowed_ips[1]", one(ep().str(epAllowedIPs, "10.0.0.0/8").str(epAllowedIPs, "ten")), "not an IP address or a CIDR"},
		{p0 + ".enforcement", one(ep().str(epEnforcement, "block")), "not enforce or audit"},
		{`spec.policy.network_policies["p"].endpoints[1].enforcement`, pb(nil).entry(polNetwork, "p", networkPolicy("p",
			ep().str(epEnforcement, "audit"), pb(nil).str(epHost, "b.example.com").num(epPort, 443).str(epEnforcement, "enforce"))), "one mode"},
		{p0, one(ep().num(40, 1)), "field number 40"},
		{"spec.policy", pb(nil).num(99, 1), "field number 99"},
	} {
		_, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "refused", Spec: &openshellv1.SandboxSpec{Policy: c.policy.policy()}})
		wantCode(t, c.field, err, codes.InvalidArgument, c.field+": ", c.says)
	}
	if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "refused"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused create wrote something: %v", err)
	}
}

// UpdateConfig replaces a sandbox's policy in one shoal UpdateSandbox: the
// version moves when the policy changes and stays when it does not, a
// stale expected_resource_version is ABORTED, and what shoal refuses is
// INVALID_ARGUMENT naming the field, nothing written.
func TestPolicyUpdateConfig(t *testing.T) {
	t.Parallel()
	n, oc, conn := policyNode(t)
	ctx := ctxT(t, 2*time.Minute)
	first := pb(nil).entry(polNetwork, "a", networkPolicy("a", pb(nil).str(epHost, "api.example.com").num(epPort, 443)))
	if _, err := oc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "upd", Spec: &openshellv1.SandboxSpec{Policy: first.policy()}}); err != nil {
		t.Fatal(err)
	}
	before := egressOfSandbox(t, ctx, n, "upd")
	if before.Spec.Egress.GetVersion() != 1 {
		t.Fatalf("version at create: %v", before.Spec.Egress)
	}

	next := pb(nil).entry(polNetwork, "openai", networkPolicy("openai",
		pb(nil).str(epHost, "api.openai.com").num(epPort, 443).str(epEnforcement, "enforce"),
		pb(nil).str(epHost, "**.pypi.org").ports(443).str(epAllowedIPs, "151.101.0.0/16")))
	// At the version read: the owner's status writes may move it between
	// the read and the update (ABORTED), so read again and retry.
	var v uint64
	var hash string
	var ann map[string]string
	testenv.Eventually(t, 30*time.Second, "UpdateConfig at the version read", func() (bool, error) {
		before = egressOfSandbox(t, ctx, n, "upd")
		req := pb(nil).str(ucName, "upd").str(ucWorkspace, "default").msg(ucPolicy, next).
			num(ucExpectedVersion, uint64(before.Meta.ResourceVersion)).
			entry(ucAnnotations, "reason", pb("tighten"))
		var err error
		v, hash, ann, err = updateConfig(ctx, conn, req)
		if status.Code(err) == codes.Aborted {
			return false, err
		}
		if err != nil {
			t.Fatal(err)
		}
		return true, nil
	})
	if v != 2 || len(hash) != 64 || ann["reason"] != "tighten" {
		t.Fatalf("UpdateConfig answered version %d, hash %q, annotations %v", v, hash, ann)
	}
	after := egressOfSandbox(t, ctx, n, "upd")
	want := &shoalv1.EgressPolicy{Mode: shoalv1.EgressMode_EGRESS_MODE_ENFORCE, Version: 2, Rules: []*shoalv1.EgressRule{
		{Host: "api.openai.com", Ports: []uint32{443}},
		{Host: "**.pypi.org", Ports: []uint32{443}, Cidrs: []string{"151.101.0.0/16"}},
	}}
	if !proto.Equal(after.Spec.Egress, want) || after.Meta.Annotations["reason"] != "tighten" {
		t.Fatalf("after UpdateConfig: spec.egress %v, annotations %v; want %v", after.Spec.Egress, after.Meta.Annotations, want)
	}
	if after.Meta.ResourceVersion == before.Meta.ResourceVersion {
		t.Fatal("UpdateConfig wrote nothing")
	}
	got, err := oc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "upd"})
	if err != nil {
		t.Fatal(err)
	}
	if p := readPolicy(t, got.Sandbox.Spec.Policy); p.Version != 2 || len(p.Policies["egress"]) != 2 || p.Policies["egress"][0].Host != "api.openai.com" {
		t.Fatalf("GetSandbox after UpdateConfig: %+v", p)
	}
	// The hash is of the policy Get answers, its version left out.
	var unversioned []byte
	for _, f := range fields(t, got.Sandbox.Spec.Policy.ProtoReflect().GetUnknown()) {
		if f.num != polVersion {
			unversioned = pb(unversioned).msg(f.num, f.b)
		}
	}
	if sum := sha256.Sum256(unversioned); hex.EncodeToString(sum[:]) != hash {
		t.Fatalf("policy_hash %s is not the SHA-256 of the policy Get answers", hash)
	}

	// The same policy again (no expected version): nothing changes.
	v2, hash2, _, err := updateConfig(ctx, conn, pb(nil).str(ucName, "upd").msg(ucPolicy, next))
	if err != nil || v2 != 2 || hash2 != hash {
		t.Fatalf("the same policy again: version %d, hash %s (%v)", v2, hash2, err)
	}

	// Refused, nothing written.
	stale := pb(nil).str(ucName, "upd").msg(ucPolicy, first).num(ucExpectedVersion, uint64(before.Meta.ResourceVersion))
	_, _, _, err = updateConfig(ctx, conn, stale)
	wantCode(t, "a stale expected_resource_version", err, codes.Aborted)
	for _, c := range []struct {
		field string
		req   pb
	}{
		{"setting_key", pb(nil).str(ucName, "upd").str(ucSettingKey, "log_level")},
		{"global", pb(nil).num(ucGlobal, 1).msg(ucPolicy, first)},
		{"merge_operations", pb(nil).str(ucName, "upd").msg(ucMergeOperations, pb(nil).msg(1, nil))},
		{"policy.filesystem", pb(nil).str(ucName, "upd").msg(ucPolicy, pb(first).msg(polFilesystem, nil))},
		{`policy.network_policies["a"].endpoints[0].tls`, pb(nil).str(ucName, "upd").msg(ucPolicy,
			pb(nil).entry(polNetwork, "a", networkPolicy("a", pb(nil).str(epHost, "x.example.com").num(epPort, 443).str(epTLS, "terminate"))))},
		{"name", pb(nil).msg(ucPolicy, first)},
		{"policy", pb(nil).str(ucName, "upd")},
		{"openshell.v1.UpdateConfigRequest", pb(nil).str(ucName, "upd").msg(ucPolicy, first).num(42, 1)},
	} {
		_, _, _, err := updateConfig(ctx, conn, c.req)
		wantCode(t, c.field, err, codes.InvalidArgument, c.field+": ")
	}
	_, _, _, err = updateConfig(ctx, conn, pb(nil).str(ucName, "nobody").msg(ucPolicy, first))
	wantCode(t, "a missing sandbox", err, codes.NotFound)
	// (The owner's status writes may move the record's version: the spec
	// is what must not move.)
	if now := egressOfSandbox(t, ctx, n, "upd"); !proto.Equal(now.Spec.Egress, want) {
		t.Fatalf("a refused update wrote: spec.egress %v, want %v", now.Spec.Egress, want)
	}

	// Back to the first policy: the version moves on.
	v3, hash3, _, err := updateConfig(ctx, conn, pb(nil).str(ucName, "upd").msg(ucPolicy, first))
	if err != nil || v3 != 3 || hash3 == hash {
		t.Fatalf("back to the first policy: version %d, hash %s (%v)", v3, hash3, err)
	}
}
