package shoalv1

import (
	"fmt"
	"net/netip"

	"shoal"
	"shoal/egress"
)

// HasEgress reports whether the sandbox's policy has rules: only then does
// it get a proxy (and no rules is no network at all).
func (x *Sandbox) HasEgress() bool {
	return len(x.GetSpec().GetEgress().GetRules()) > 0
}

// EgressPending reports whether the owning node has yet to enforce the
// sandbox's current egress policy (its status's applied version is behind
// the spec's).
func (x *Sandbox) EgressPending() bool {
	return x.GetStatus().GetEgressAppliedVersion() < x.GetSpec().GetEgress().GetVersion()
}

// Rule is the rule as package egress has it, normalised (Rule.Normalized)
// and validated; errors are KindInvalid naming field (the rule's place in
// the request, such as sandbox.spec.egress.rules[2]) and what is wrong.
func (x *EgressRule) Rule(field string) (egress.Rule, error) {
	r := egress.Rule{Host: x.GetHost()}
	if len(x.GetPorts()) > egress.MaxPortsPerRule {
		return egress.Rule{}, shoal.Invalid(field+".ports", "%d ports, at most %d", len(x.GetPorts()), egress.MaxPortsPerRule)
	}
	for i, p := range x.GetPorts() {
		if p == 0 || p > 65535 {
			return egress.Rule{}, shoal.Invalid(fmt.Sprintf("%s.ports[%d]", field, i), "%d is not a port: 1-65535", p)
		}
		r.Ports = append(r.Ports, uint16(p))
	}
	if len(x.GetCidrs()) > egress.MaxCIDRsPerRule {
		return egress.Rule{}, shoal.Invalid(field+".cidrs", "%d CIDRs, at most %d", len(x.GetCidrs()), egress.MaxCIDRsPerRule)
	}
	for i, c := range x.GetCidrs() {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return egress.Rule{}, shoal.Invalid(fmt.Sprintf("%s.cidrs[%d]", field, i), "%q is not a CIDR (10.0.0.0/8, fd00::/8)", c)
		}
		r.CIDRs = append(r.CIDRs, p)
	}
	n, err := r.Normalized()
	if err != nil {
		return egress.Rule{}, shoal.Invalid(field, "%q: %v", x.GetHost(), err)
	}
	return n, nil
}

// EgressRuleOf is the API form of a rule.
func EgressRuleOf(r egress.Rule) *EgressRule {
	out := &EgressRule{Host: r.Host}
	for _, p := range r.Ports {
		out.Ports = append(out.Ports, uint32(p))
	}
	for _, c := range r.CIDRs {
		out.Cidrs = append(out.Cidrs, c.String())
	}
	return out
}

// Policy is the policy as package egress has it: every rule normalised and
// the whole validated (bounds, mode), errors naming field and the rule
// (field.rules[i]). A nil policy is no rules.
func (x *EgressPolicy) Policy(field string) (egress.Policy, error) {
	p := egress.Policy{Version: x.GetVersion()}
	switch x.GetMode() {
	case EgressMode_EGRESS_MODE_UNSPECIFIED, EgressMode_EGRESS_MODE_ENFORCE:
		p.Mode = egress.ModeEnforce
	case EgressMode_EGRESS_MODE_AUDIT:
		p.Mode = egress.ModeAudit
	default:
		return egress.Policy{}, shoal.Invalid(field+".mode", "%d is not a mode: ENFORCE or AUDIT", x.GetMode())
	}
	if len(x.GetRules()) > egress.MaxRules {
		return egress.Policy{}, shoal.Invalid(field+".rules", "%d rules, at most %d", len(x.GetRules()), egress.MaxRules)
	}
	for i, r := range x.GetRules() {
		rule, err := r.Rule(fmt.Sprintf("%s.rules[%d]", field, i))
		if err != nil {
			return egress.Policy{}, err
		}
		p.Rules = append(p.Rules, rule)
	}
	if err := p.Validate(); err != nil {
		return egress.Policy{}, err
	}
	return p, nil
}

// EgressPolicyOf is the API form of a policy (version included; cut_below
// is the caller's).
func EgressPolicyOf(p egress.Policy) *EgressPolicy {
	out := &EgressPolicy{Version: p.Version, Mode: EgressModeOf(p.Mode)}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, EgressRuleOf(r))
	}
	return out
}

// EgressModeOf is the API form of a mode.
func EgressModeOf(m egress.Mode) EgressMode {
	if m == egress.ModeAudit {
		return EgressMode_EGRESS_MODE_AUDIT
	}
	return EgressMode_EGRESS_MODE_ENFORCE
}
