package openshellapi

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	sandboxv1 "shoal/api/openshell/sandbox/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/egress"
)

// OpenShell's sandbox policy (openshell.sandbox.v1.SandboxPolicy) is
// shoal's egress policy (spec.egress, package egress), as far as shoal
// enforces it:
//
//   - every endpoint of every network policy (policies in key order,
//     endpoints in order) is one egress rule: host is its host, ports (or
//     port, when ports is empty) its ports, allowed_ips its CIDRs (an
//     address is its /32 or /128);
//   - enforcement is the policy's mode, which shoal applies to the whole
//     sandbox: audit when an endpoint says audit, enforce otherwise;
//     endpoints that disagree are refused;
//   - a policy without endpoints is the enforce policy without rules: no
//     network, as in OpenShell;
//   - version is the server's, on the way in ignored as shoal.v1's is.
//
// Every other part set (filesystem, landlock, process, middlewares,
// binaries, L7 protocols and rules, TLS termination, credential handling)
// is INVALID_ARGUMENT naming its OpenShell field: shoal does not enforce
// it, and a policy half applied would read as applied.
//
// api/openshell declares SandboxPolicy without fields, so a client's
// policy arrives as the message's unknown fields, its encoding; this file
// reads that against the fields of OpenShell's messages at the target
// commit (the tables below, pinned by TestPolicyWireFacts) and writes the
// policy GetSandbox answers the same way. A field number the tables do not
// have (a field OpenShell added later) is refused by its number, never
// skipped.

// wireField is one field of an OpenShell message: its name, number and
// type as OpenShell's proto declares them, and, for a field shoal refuses
// when set, why (the fields shoal reads have none).
type wireField struct {
	name string
	num  protowire.Number
	typ  string // "string", "uint32", "repeated string", ".pkg.Message", "map<string, .pkg.Message>"
	why  string
}

// set reports whether the field is set in a value read from the wire: a
// scalar that is not its zero value, a message that is present (empty or
// not), one element of a list or a map.
func (f wireField) set(v uint64, b []byte) bool {
	if strings.HasPrefix(f.typ, ".") || strings.HasPrefix(f.typ, "repeated ") || strings.HasPrefix(f.typ, "map<") {
		return true
	}
	return v != 0 || len(b) > 0
}

func fieldOf(fields []wireField, num protowire.Number) (wireField, bool) {
	i := slices.IndexFunc(fields, func(f wireField) bool { return f.num == num })
	if i < 0 {
		return wireField{}, false
	}
	return fields[i], true
}

const (
	noL7          = "shoal admits connections by host and port and inspects no requests (OpenShell's L7 policy)"
	noCredentials = "shoal's egress proxy holds no credentials and rewrites nothing"
)

// The message names, for the wire-facts test.
const (
	policyMessage   = "openshell.sandbox.v1.SandboxPolicy"
	ruleMessage     = "openshell.sandbox.v1.NetworkPolicyRule"
	endpointMessage = "openshell.sandbox.v1.NetworkEndpoint"
)

var policyFields = []wireField{
	{name: "version", num: 1, typ: "uint32"},
	{name: "filesystem", num: 2, typ: ".openshell.sandbox.v1.FilesystemPolicy", why: "shoal enforces no filesystem policy: a sandbox's files are its container's"},
	{name: "landlock", num: 3, typ: ".openshell.sandbox.v1.LandlockPolicy", why: "shoal applies no Landlock rules"},
	{name: "process", num: 4, typ: ".openshell.sandbox.v1.ProcessPolicy", why: "shoal runs a sandbox's process as its image's user"},
	{name: "network_policies", num: 5, typ: "map<string, .openshell.sandbox.v1.NetworkPolicyRule>"},
	{name: "network_middlewares", num: 6, typ: "map<string, .openshell.sandbox.v1.NetworkMiddlewareConfig>", why: "shoal's egress proxy runs no middlewares"},
}

var ruleFields = []wireField{
	{name: "name", num: 1, typ: "string"},
	{name: "endpoints", num: 2, typ: "repeated .openshell.sandbox.v1.NetworkEndpoint"},
	{name: "binaries", num: 3, typ: "repeated .openshell.sandbox.v1.NetworkBinary", why: "shoal's egress proxy sees a sandbox's connections, not which binary made them (a rule admits the whole sandbox)"},
}

var endpointFields = []wireField{
	{name: "host", num: 1, typ: "string"},
	{name: "port", num: 2, typ: "uint32"},
	{name: "protocol", num: 3, typ: "string"},
	{name: "tls", num: 4, typ: "string"},
	{name: "enforcement", num: 5, typ: "string"},
	{name: "access", num: 6, typ: "string", why: noL7},
	{name: "rules", num: 7, typ: "repeated .openshell.sandbox.v1.L7Rule", why: noL7},
	{name: "allowed_ips", num: 8, typ: "repeated string"},
	{name: "ports", num: 9, typ: "repeated uint32"},
	{name: "deny_rules", num: 10, typ: "repeated .openshell.sandbox.v1.L7DenyRule", why: noL7},
	{name: "allow_encoded_slash", num: 11, typ: "bool", why: noL7},
	{name: "persisted_queries", num: 12, typ: "string", why: noL7},
	{name: "graphql_persisted_queries", num: 13, typ: "map<string, .openshell.sandbox.v1.GraphqlOperation>", why: noL7},
	{name: "graphql_max_body_bytes", num: 14, typ: "uint32", why: noL7},
	{name: "path", num: 15, typ: "string", why: noL7},
	{name: "websocket_credential_rewrite", num: 16, typ: "bool", why: noCredentials},
	{name: "request_body_credential_rewrite", num: 17, typ: "bool", why: noCredentials},
	{name: "advisor_proposed", num: 18, typ: "bool", why: "shoal has no policy advisor"},
	{name: "credential_signing", num: 19, typ: "string", why: noCredentials},
	{name: "signing_service", num: 20, typ: "string", why: noCredentials},
	{name: "signing_region", num: 21, typ: "string", why: noCredentials},
	{name: "json_rpc_max_body_bytes", num: 22, typ: "uint32", why: noL7},
	{name: "mcp", num: 23, typ: ".openshell.sandbox.v1.McpOptions", why: noL7},
	{name: "credential_binding", num: 24, typ: ".openshell.sandbox.v1.NetworkCredentialBinding", why: noCredentials},
	{name: "allow_uninspected_credentials", num: 25, typ: "bool", why: noCredentials},
	// OpenShell's gateway derives it and ignores what clients send; so
	// does shoal.
	{name: "provider_credentialed", num: 26, typ: "bool"},
}

// wireValue is one field as read from an encoding: its number, its wire
// type, and its value (v for a varint, b for bytes).
type wireValue struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// eachField calls f with every field of the encoding b, in order. An
// encoding that does not parse is INVALID_ARGUMENT naming field.
func eachField(field string, b []byte, f func(wireValue) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return invalid(field, "not a valid protobuf encoding: %v", protowire.ParseError(n))
		}
		b = b[n:]
		w := wireValue{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			w.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			w.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return invalid(field, "not a valid protobuf encoding: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(w); err != nil {
			return err
		}
	}
	return nil
}

// known is the field w is, checked: a field the table does not have, or
// one shoal refuses that is set, is INVALID_ARGUMENT naming it (under
// field: "" for a request's own fields), and so is a field shoal reads
// whose wire type is not its own. ok is false for a refused field that is
// not set (its zero value sent).
func known(field, message string, fields []wireField, w wireValue) (f wireField, ok bool, err error) {
	f, found := fieldOf(fields, w.num)
	if !found {
		return f, false, invalid(cmp.Or(field, message), "field number %d is not a field of OpenShell's %s that shoal knows (OpenShell commit 2f7fb65); shoal enforces only what it knows: leave it unset", w.num, message)
	}
	name := f.name
	if field != "" {
		name = field + "." + f.name
	}
	if f.why != "" {
		if !f.set(w.v, w.b) {
			return f, false, nil
		}
		return f, false, invalid(name, "%s; leave it unset", f.why)
	}
	want := protowire.BytesType
	switch {
	case f.typ == "uint32" || f.typ == "uint64" || f.typ == "bool":
		want = protowire.VarintType
	case f.typ == "repeated uint32" && w.typ == protowire.VarintType:
		want = protowire.VarintType // one element, not packed
	}
	if w.typ != want {
		return f, false, invalid(name, "wire type %d is not that of a %s field", w.typ, f.typ)
	}
	if (f.typ == "string" || f.typ == "repeated string") && !utf8.Valid(w.b) {
		return f, false, invalid(name, "not valid UTF-8")
	}
	return f, true, nil
}

// mapEntry reads a map<string, ...> entry: its key and its value's bytes.
func mapEntry(field string, b []byte) (key string, value []byte, err error) {
	err = eachField(field, b, func(w wireValue) error {
		switch {
		case w.num == 1 && w.typ == protowire.BytesType && utf8.Valid(w.b):
			key = string(w.b)
		case w.num == 2 && w.typ == protowire.BytesType:
			value = w.b
		default:
			return invalid(field, "not a valid map entry (field %d, wire type %d)", w.num, w.typ)
		}
		return nil
	})
	return key, value, err
}

// endpoint is an OpenShell NetworkEndpoint as far as shoal reads it.
type endpoint struct {
	host, protocol, tls, enforcement string
	port                             uint32
	ports                            []uint32
	allowedIPs                       []string
}

func readEndpoint(field string, b []byte) (endpoint, error) {
	var e endpoint
	err := eachField(field, b, func(w wireValue) error {
		f, ok, err := known(field, endpointMessage, endpointFields, w)
		if !ok || err != nil {
			return err
		}
		switch f.name {
		case "host":
			e.host = string(w.b)
		case "port":
			e.port = clampUint32(w.v)
		case "protocol":
			e.protocol = string(w.b)
		case "tls":
			e.tls = string(w.b)
		case "enforcement":
			e.enforcement = string(w.b)
		case "allowed_ips":
			e.allowedIPs = append(e.allowedIPs, string(w.b))
		case "ports":
			if w.typ == protowire.VarintType {
				e.ports = append(e.ports, clampUint32(w.v))
				return nil
			}
			for b := w.b; len(b) > 0; {
				v, n := protowire.ConsumeVarint(b)
				if n < 0 {
					return invalid(field+".ports", "not a valid packed list: %v", protowire.ParseError(n))
				}
				e.ports = append(e.ports, clampUint32(v))
				b = b[n:]
			}
		}
		return nil
	})
	return e, err
}

// clampUint32 keeps a varint read for a uint32 field out of range (a
// port check then refuses it) instead of wrapping it into range.
func clampUint32(v uint64) uint32 {
	return uint32(min(v, math.MaxUint32))
}

// alwaysBlocked are the ranges OpenShell refuses whatever a policy says
// (loopback and link-local, the cloud metadata address among them), as
// their NAT64 forms, which shoal's proxy classifies as the address they
// carry. A shoal rule's range admits whatever it names, so a range
// reaching into these is refused: on shoal it would reach the node's own
// loopback.
var alwaysBlocked = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("64:ff9b::7f00:0/104"),
	netip.MustParsePrefix("64:ff9b::a9fe:0/112"),
}

func blocked(p netip.Prefix) bool {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return slices.ContainsFunc(alwaysBlocked, p.Overlaps)
}

const blockedWhy = "OpenShell blocks loopback (127.0.0.0/8, ::1) and link-local (169.254.0.0/16, fe80::/10) addresses whatever a policy says, and on shoal a rule's range admits what it names (the node's own loopback among them): give ranges that leave them out"

// rule is the egress rule for an endpoint, checked; errors name the
// endpoint's fields (under field).
func (e endpoint) rule(field string) (*shoalv1.EgressRule, error) {
	switch strings.ToLower(e.protocol) {
	case "", "tcp":
	default:
		return nil, invalid(field+".protocol", "%q selects OpenShell's L7 inspection, which shoal does not do (%s): use tcp or leave it empty", e.protocol, noL7)
	}
	switch strings.ToLower(e.tls) {
	case "", "passthrough":
	default:
		return nil, invalid(field+".tls", "%q: shoal's egress proxy relays TLS as the sandbox sends it and terminates none: use passthrough or leave it empty", e.tls)
	}
	if e.host == "" {
		return nil, invalid(field+".host", "is required: a shoal egress rule admits a host (an endpoint of allowed_ips alone, any host that resolves into them, has no equivalent)")
	}
	if h, err := netip.ParsePrefix(e.host); err == nil && blocked(h) {
		return nil, invalid(field+".host", "%q: %s", e.host, blockedWhy)
	}
	if a, err := netip.ParseAddr(e.host); err == nil && blocked(netip.PrefixFrom(a, a.BitLen())) {
		return nil, invalid(field+".host", "%q: %s", e.host, blockedWhy)
	}
	out := &shoalv1.EgressRule{Host: e.host}
	switch {
	case len(e.ports) > 0: // ports wins over port, as in OpenShell
		if len(e.ports) > egress.MaxPortsPerRule {
			return nil, invalid(field+".ports", "%d ports, at most %d", len(e.ports), egress.MaxPortsPerRule)
		}
		for i, p := range e.ports {
			if p == 0 || p > 65535 {
				return nil, invalid(fmt.Sprintf("%s.ports[%d]", field, i), "%d is not a port: 1-65535", p)
			}
		}
		out.Ports = slices.Clone(e.ports)
	case e.port == 0:
		return nil, invalid(field+".port", "is required: set port or ports (as OpenShell requires)")
	case e.port > 65535:
		return nil, invalid(field+".port", "%d is not a port: 1-65535", e.port)
	default:
		out.Ports = []uint32{e.port}
	}
	if len(e.allowedIPs) > egress.MaxCIDRsPerRule {
		return nil, invalid(field+".allowed_ips", "%d entries, at most %d", len(e.allowedIPs), egress.MaxCIDRsPerRule)
	}
	for i, s := range e.allowedIPs {
		f := fmt.Sprintf("%s.allowed_ips[%d]", field, i)
		p, err := netip.ParsePrefix(s)
		if a, aerr := netip.ParseAddr(s); aerr == nil && a.Zone() == "" {
			p, err = netip.PrefixFrom(a, a.BitLen()), nil
		}
		if err != nil {
			return nil, invalid(f, "%q is not an IP address or a CIDR (10.0.5.20, 10.0.5.0/24)", s)
		}
		if p != p.Masked() {
			return nil, invalid(f, "CIDR %s has host bits set: did you mean %s?", s, p.Masked())
		}
		if blocked(p) {
			return nil, invalid(f, "%q: %s", s, blockedWhy)
		}
		out.Cidrs = append(out.Cidrs, p.String())
	}
	// Ports and ranges are checked: what is left to fail is the host.
	if _, err := out.Rule(field + ".host"); err != nil {
		return nil, grpcError(err, false)
	}
	return out, nil
}

// egressOf is shoal's egress policy for an OpenShell policy (nil for
// none), or INVALID_ARGUMENT naming, under field (spec.policy, policy),
// the first part of it that shoal does not enforce or that is not valid.
func egressOf(p *sandboxv1.SandboxPolicy, field string) (*shoalv1.EgressPolicy, error) {
	if p == nil {
		return nil, nil
	}
	policies := map[string][]byte{}
	err := eachField(field, p.ProtoReflect().GetUnknown(), func(w wireValue) error {
		f, ok, err := known(field, policyMessage, policyFields, w)
		if !ok || err != nil || f.name != "network_policies" {
			return err // version is the server's
		}
		key, value, err := mapEntry(field+".network_policies", w.b)
		if err != nil {
			return err
		}
		policies[key] = value // a repeated key: the last wins, as in a map
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &shoalv1.EgressPolicy{Mode: shoalv1.EgressMode_EGRESS_MODE_ENFORCE}
	var audit, enforce string // the first endpoint saying so
	for _, key := range slices.Sorted(maps.Keys(policies)) {
		pf := fmt.Sprintf("%s.network_policies[%q]", field, key)
		var endpoints [][]byte
		err := eachField(pf, policies[key], func(w wireValue) error {
			f, ok, err := known(pf, ruleMessage, ruleFields, w)
			if ok && f.name == "endpoints" {
				endpoints = append(endpoints, w.b)
			}
			return err // name is the caller's label: shoal keeps no names
		})
		if err != nil {
			return nil, err
		}
		for i, b := range endpoints {
			ef := fmt.Sprintf("%s.endpoints[%d]", pf, i)
			e, err := readEndpoint(ef, b)
			if err != nil {
				return nil, err
			}
			r, err := e.rule(ef)
			if err != nil {
				return nil, err
			}
			switch strings.ToLower(e.enforcement) {
			case "":
			case "enforce":
				if audit != "" {
					return nil, invalid(ef+".enforcement", "\"enforce\", but %s.enforcement is \"audit\": %s", audit, oneMode)
				}
				enforce = cmp.Or(enforce, ef)
			case "audit":
				if enforce != "" {
					return nil, invalid(ef+".enforcement", "\"audit\", but %s.enforcement is \"enforce\": %s", enforce, oneMode)
				}
				audit = cmp.Or(audit, ef)
				out.Mode = shoalv1.EgressMode_EGRESS_MODE_AUDIT
			default:
				return nil, invalid(ef+".enforcement", "%q is not enforce or audit", e.enforcement)
			}
			out.Rules = append(out.Rules, r)
		}
	}
	if len(out.Rules) > egress.MaxRules {
		return nil, invalid(field+".network_policies", "%d endpoints, at most %d (one shoal egress rule each)", len(out.Rules), egress.MaxRules)
	}
	return out, nil
}

const oneMode = "shoal applies one mode to the whole sandbox (audit admits every connection and reports the ones enforce would refuse): give every endpoint the same enforcement"

// EgressPolicyName is the key, and the name, of the one network policy
// GetSandbox answers for a sandbox's egress rules: shoal keeps rules, not
// the names and grouping they were given in.
const EgressPolicyName = "egress"

// policyOf is the OpenShell form of a sandbox's egress policy: none for
// none; otherwise its version, and its rules as the endpoints of one
// network policy (EgressPolicyName), each with the policy's mode as its
// enforcement. Rules come back as shoal stores them: hosts in lower case,
// ports sorted, an address range of one address as the address.
func policyOf(e *shoalv1.EgressPolicy) *sandboxv1.SandboxPolicy {
	if e == nil {
		return nil
	}
	p := &sandboxv1.SandboxPolicy{}
	p.ProtoReflect().SetUnknown(appendPolicy(nil, e, true))
	return p
}

// appendPolicy appends the encoding of e's OpenShell form (policyOf),
// with its version or without (the policy hash UpdateConfig answers).
func appendPolicy(b []byte, e *shoalv1.EgressPolicy, version bool) []byte {
	if v := e.GetVersion(); version && v > 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType) // version
		b = protowire.AppendVarint(b, uint64(min(v, math.MaxUint32)))
	}
	if len(e.GetRules()) == 0 {
		return b
	}
	enforcement := "enforce"
	if e.GetMode() == shoalv1.EgressMode_EGRESS_MODE_AUDIT {
		enforcement = "audit"
	}
	var rule []byte                                // NetworkPolicyRule
	rule = appendString(rule, 1, EgressPolicyName) // name
	for _, r := range e.GetRules() {
		var ep []byte // NetworkEndpoint
		ep = appendString(ep, 1, r.GetHost())
		ep = appendString(ep, 5, enforcement)
		for _, c := range r.GetCidrs() {
			if p, err := netip.ParsePrefix(c); err == nil && p.IsSingleIP() {
				c = p.Addr().String()
			}
			ep = appendString(ep, 8, c) // allowed_ips
		}
		if len(r.GetPorts()) > 0 {
			var packed []byte
			for _, port := range r.GetPorts() {
				packed = protowire.AppendVarint(packed, uint64(port))
			}
			ep = protowire.AppendTag(ep, 9, protowire.BytesType) // ports, packed
			ep = protowire.AppendBytes(ep, packed)
		}
		rule = protowire.AppendTag(rule, 2, protowire.BytesType) // endpoints
		rule = protowire.AppendBytes(rule, ep)
	}
	var entry []byte // the map entry: key, value
	entry = appendString(entry, 1, EgressPolicyName)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, rule)
	b = protowire.AppendTag(b, 5, protowire.BytesType) // network_policies
	return protowire.AppendBytes(b, entry)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
