package apiserver

import (
	"fmt"
	"slices"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/egress"
)

// Egress policies (spec.egress, package egress): validated whole before
// anything is read or written, stored normalised, and versioned by the
// server. The version moves on every write that changes the rules or the
// mode (or cuts connections), inside the one update loop, so the owning
// node's status.egress_applied_version says exactly which write it
// enforces.

// egressOnCreate normalises a new sandbox's policy: version 1 when it has
// rules or a mode, nil when it has neither. It was validated by
// validateSandbox.
func egressOnCreate(spec *shoalv1.SandboxSpec) error {
	if spec.Egress == nil {
		return nil
	}
	p, err := spec.Egress.Policy("sandbox.spec.egress")
	if err != nil {
		return err
	}
	if len(p.Rules) == 0 && spec.Egress.GetMode() == shoalv1.EgressMode_EGRESS_MODE_UNSPECIFIED {
		spec.Egress = nil
		return nil
	}
	p.Rules = dedupeRules(p.Rules)
	p.Version = 1
	spec.Egress = shoalv1.EgressPolicyOf(p)
	return nil
}

// egressChange is an UpdateSandbox's egress part, validated.
type egressChange struct {
	set         *egress.Policy
	add, remove []egress.Rule
	mode        *egress.Mode
	cut         bool
}

func (c *egressChange) empty() bool {
	return c.set == nil && len(c.add) == 0 && len(c.remove) == 0 && c.mode == nil && !c.cut
}

// egressChangeOf validates an UpdateSandboxRequest's egress fields (before
// the record is read): errors name the field and rule.
func egressChangeOf(req *shoalv1.UpdateSandboxRequest) (*egressChange, error) {
	c := &egressChange{cut: req.GetCutEgressConnections()}
	if req.SetEgress != nil {
		p, err := req.SetEgress.Policy("set_egress")
		if err != nil {
			return nil, err
		}
		p.Rules = dedupeRules(p.Rules)
		c.set = &p
	}
	if len(req.AddEgressRules) > egress.MaxRules {
		return nil, shoal.Invalid("add_egress_rules", "%d rules, at most %d", len(req.AddEgressRules), egress.MaxRules)
	}
	for i, r := range req.AddEgressRules {
		rule, err := r.Rule(fmt.Sprintf("add_egress_rules[%d]", i))
		if err != nil {
			return nil, err
		}
		c.add = append(c.add, rule)
	}
	if len(req.RemoveEgressRules) > egress.MaxRules {
		return nil, shoal.Invalid("remove_egress_rules", "%d rules, at most %d", len(req.RemoveEgressRules), egress.MaxRules)
	}
	for i, r := range req.RemoveEgressRules {
		rule, err := r.Rule(fmt.Sprintf("remove_egress_rules[%d]", i))
		if err != nil {
			return nil, err
		}
		c.remove = append(c.remove, rule)
	}
	switch req.GetEgressMode() {
	case shoalv1.EgressMode_EGRESS_MODE_UNSPECIFIED:
	case shoalv1.EgressMode_EGRESS_MODE_ENFORCE:
		m := egress.ModeEnforce
		c.mode = &m
	case shoalv1.EgressMode_EGRESS_MODE_AUDIT:
		m := egress.ModeAudit
		c.mode = &m
	default:
		return nil, shoal.Invalid("egress_mode", "%d is not a mode: EGRESS_MODE_ENFORCE or EGRESS_MODE_AUDIT", req.GetEgressMode())
	}
	return c, nil
}

// apply changes sb's policy as the request asks, on the record as read in
// this attempt of the update loop. The version moves only when the rules
// or the mode change, or connections are to be cut.
func (c *egressChange) apply(sb *shoalv1.Sandbox) error {
	cur := sb.Spec.GetEgress()
	p, err := cur.Policy("sandbox.spec.egress") // stored normalised; read back as rules
	if err != nil {
		return err
	}
	before := p
	before.Rules = slices.Clone(p.Rules)
	if c.set != nil {
		p.Rules, p.Mode = slices.Clone(c.set.Rules), c.set.Mode
	}
	for _, r := range c.add {
		if !slices.ContainsFunc(p.Rules, r.Equal) {
			p.Rules = append(p.Rules, r)
		}
	}
	for i, r := range c.remove {
		j := slices.IndexFunc(p.Rules, r.Equal)
		if j < 0 {
			return shoal.NotFound("remove_egress_rules[%d]: sandbox %q has no egress rule %s", i, sb.Meta.Name, r)
		}
		p.Rules = slices.Delete(p.Rules, j, j+1)
	}
	if c.mode != nil {
		p.Mode = *c.mode
	}
	if len(p.Rules) > egress.MaxRules {
		return shoal.Invalid("add_egress_rules", "the policy would have %d rules, at most %d", len(p.Rules), egress.MaxRules)
	}
	changed := p.Mode != before.Mode || !slices.EqualFunc(p.Rules, before.Rules, egress.Rule.Equal)
	if !changed && !c.cut {
		return nil
	}
	if len(p.Rules) == 0 && p.Mode == egress.ModeEnforce && cur.GetVersion() == 0 {
		return nil // nothing set before, nothing now
	}
	p.Version = cur.GetVersion() + 1
	next := shoalv1.EgressPolicyOf(p)
	next.CutBelow = cur.GetCutBelow()
	if c.cut {
		next.CutBelow = p.Version
	}
	sb.Spec.Egress = next
	return nil
}

// dedupeRules drops rules that repeat an earlier one (normalised rules).
func dedupeRules(rules []egress.Rule) []egress.Rule {
	var out []egress.Rule
	for _, r := range rules {
		if !slices.ContainsFunc(out, r.Equal) {
			out = append(out, r)
		}
	}
	return out
}

// egressApplied reports whether a create --wait may return: the sandbox
// left PROVISIONING and, when it is READY with egress rules, its node
// enforces the policy it was created with (READY alone comes before the
// node's proxy serves it: the first connection would be refused).
func egressApplied(sb *shoalv1.Sandbox) bool {
	if !sb.HasEgress() || sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_READY || !sb.EgressPending() {
		return true
	}
	// A node that cannot enforce it says so (condition Egress False):
	// nothing more will come to wait for.
	for _, c := range sb.GetStatus().GetConditions() {
		if c.Type == "Egress" && c.Status == "False" && c.Reason != "NoRules" {
			return true
		}
	}
	return false
}
