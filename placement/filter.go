package placement

import (
	"fmt"
	"slices"
	"strings"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// ConditionEngineUnavailable is the node condition a node publishes with
// its registration while its container engine does not answer: "True"
// since the engine stopped answering for longer than the node's
// --engine-grace. Filter skips such a node.
const ConditionEngineUnavailable = "EngineUnavailable"

// Request says where a new sandbox may go.
type Request struct {
	// Node, if set, is the only candidate.
	Node string
	// Selector: a candidate's labels must include all of these.
	Selector map[string]string
}

// Why classifies the reason a node was skipped.
type Why int

const (
	Corrupt           Why = iota + 1 // its registry record does not decode
	NotReady                         // no live registration
	Cordoned                         // cordoned by an operator
	EngineUnavailable                // its EngineUnavailable condition is "True"
	Full                             // it holds max_sandboxes sandboxes
	ExceedsResources                 // the sandbox asks for more than the node has or allows
	LacksLabel                       // a selector term is not among its labels
)

// Reason is why one node was skipped. Msg names the node and says why, in
// words a user can act on.
type Reason struct {
	Node string
	Why  Why
	Msg  string
}

// NoFitError is Filter's refusal: no node fits, and why each considered
// node does not. It is a FAILED_PRECONDITION (shoal.KindOf).
type NoFitError struct {
	// Reasons: one per node considered, in the order given to Filter.
	// Empty when no node was considered (Pinned unknown, or none
	// registered).
	Reasons []Reason
	// Pinned is the request's node, if it pinned one.
	Pinned string
	err    *shoal.Error
}

func (e *NoFitError) Error() string { return e.err.Error() }
func (e *NoFitError) Unwrap() error { return e.err }

func noFit(pinned string, reasons []Reason) *NoFitError {
	var msg string
	switch {
	case pinned != "" && len(reasons) == 0:
		msg = fmt.Sprintf("node %q is not known; `shoal node list` shows the nodes", pinned)
	case len(reasons) == 0:
		msg = "no node fits: no node has registered; start one with `shoal node start`"
	default:
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = r.Msg
		}
		msg = "no node fits: " + strings.Join(parts, ", ")
	}
	return &NoFitError{Reasons: reasons, Pinned: pinned, err: &shoal.Error{Kind: shoal.KindFailedPrecondition, Msg: msg}}
}

// Filter returns the nodes among nodes that a sandbox asking for res may
// be placed on under req, in their given order, or a *NoFitError naming
// each node considered and why it may not. Each node's status (ready,
// cordoned, corrupt, sandboxes) is as the caller read it.
func Filter(nodes []*shoalv1.Node, req Request, res *shoalv1.Resources) ([]*shoalv1.Node, error) {
	var why []Reason
	var fit []*shoalv1.Node
	for _, n := range nodes {
		if req.Node != "" && n.Name != req.Node {
			continue
		}
		if r, skip := Skip(n, req, res); skip {
			why = append(why, r)
			continue
		}
		fit = append(fit, n)
	}
	if len(fit) == 0 {
		return nil, noFit(req.Node, why)
	}
	return fit, nil
}

// Skip says whether n must be skipped for a sandbox asking for res under
// req's selector, and why (the first reason, in the order of doc.go).
func Skip(n *shoalv1.Node, req Request, res *shoalv1.Resources) (Reason, bool) {
	st := n.GetStatus()
	r := Reason{Node: n.Name}
	switch {
	case !st.GetReady() && st.GetCorrupt() != "":
		r.Why, r.Msg = Corrupt, n.Name+"'s registry record is corrupt"
	case !st.GetReady():
		r.Why, r.Msg = NotReady, n.Name+" not ready"
	case st.GetCordoned():
		r.Why, r.Msg = Cordoned, n.Name+" cordoned"
	case engineDown(n) != "":
		r.Why, r.Msg = EngineUnavailable, engineDown(n)
	case n.MaxSandboxes > 0 && st.GetSandboxes() >= n.MaxSandboxes:
		r.Why, r.Msg = Full, fmt.Sprintf("%s full (%d/%d)", n.Name, st.GetSandboxes(), n.MaxSandboxes)
	case exceeds(n, res) != "":
		r.Why, r.Msg = ExceedsResources, exceeds(n, res)
	case lacks(n.Labels, req.Selector) != "":
		r.Why, r.Msg = LacksLabel, n.Name+" lacks label "+lacks(n.Labels, req.Selector)
	default:
		return Reason{}, false
	}
	return r, true
}

// engineDown says why n must be skipped for its engine, or "".
func engineDown(n *shoalv1.Node) string {
	for _, c := range n.GetConditions() {
		if c.Type == ConditionEngineUnavailable && c.Status == "True" {
			return fmt.Sprintf("%s's container engine unavailable since %s", n.Name, c.GetLastTransitionTime().AsTime().Format("15:04:05Z07:00"))
		}
	}
	return ""
}

// exceeds says which of a node's sandbox maximums, or what its engine
// has, r is above, if any. (A sandbox that asks for nothing gets the
// node's defaults, which are within its maximums.)
func exceeds(n *shoalv1.Node, r *shoalv1.Resources) string {
	switch {
	case n.EngineCpuMillis > 0 && r.GetCpuMillis() > n.EngineCpuMillis:
		return fmt.Sprintf("%s's engine has %d CPUs: sandbox.spec.resources.cpu_millis up to %d, not %d", n.Name, n.EngineCpuMillis/1000, n.EngineCpuMillis, r.GetCpuMillis())
	case n.EngineMemoryBytes > 0 && r.GetMemoryBytes() > n.EngineMemoryBytes:
		return fmt.Sprintf("%s's engine has %d bytes of memory: sandbox.spec.resources.memory_bytes up to that, not %d", n.Name, n.EngineMemoryBytes, r.GetMemoryBytes())
	case n.MaxCpuMillis > 0 && r.GetCpuMillis() > n.MaxCpuMillis:
		return fmt.Sprintf("%s allows sandbox.spec.resources.cpu_millis up to %d (its --sandbox-max-cpu-millis), not %d", n.Name, n.MaxCpuMillis, r.GetCpuMillis())
	case n.MaxMemoryBytes > 0 && r.GetMemoryBytes() > n.MaxMemoryBytes:
		return fmt.Sprintf("%s allows sandbox.spec.resources.memory_bytes up to %d (its --sandbox-max-memory-mib), not %d", n.Name, n.MaxMemoryBytes, r.GetMemoryBytes())
	}
	return ""
}

// lacks returns the first selector term (in key order) a label set does
// not satisfy, as key=value.
func lacks(labels, sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v, ok := labels[k]; !ok || v != sel[k] {
			return k + "=" + sel[k]
		}
	}
	return ""
}
