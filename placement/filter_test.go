package placement_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/placement"
)

// node is a Ready, uncordoned node with no limits; opts change it.
func node(name string, opts ...func(*shoalv1.Node)) *shoalv1.Node {
	n := &shoalv1.Node{Name: name, Labels: map[string]string{}, Status: &shoalv1.NodeStatus{Ready: true}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func notReady(n *shoalv1.Node) { n.Status.Ready = false }
func cordoned(n *shoalv1.Node) { n.Status.Cordoned = true }
func corrupt(n *shoalv1.Node)  { n.Status.Ready, n.Status.Corrupt = false, "does not decode" }
func label(k, v string) func(*shoalv1.Node) {
	return func(n *shoalv1.Node) { n.Labels[k] = v }
}
func holding(have, max int32) func(*shoalv1.Node) {
	return func(n *shoalv1.Node) { n.Status.Sandboxes, n.MaxSandboxes = have, max }
}
func engine(status string) func(*shoalv1.Node) {
	return func(n *shoalv1.Node) {
		n.Conditions = append(n.Conditions, &shoalv1.Condition{Type: placement.ConditionEngineUnavailable, Status: status,
			LastTransitionTime: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))})
	}
}

func res(cpu int64, mem int64) *shoalv1.Resources {
	return &shoalv1.Resources{CpuMillis: cpu, MemoryBytes: mem}
}

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    *shoalv1.Node
		req  placement.Request
		res  *shoalv1.Resources
		why  placement.Why // 0: fits
		msg  string
	}{
		{name: "fits", n: node("a")},
		{name: "fits with room", n: node("a", holding(2, 3))},
		{name: "no capacity means no limit", n: node("a", holding(1000, 0))},
		{name: "corrupt", n: node("a", corrupt), why: placement.Corrupt, msg: "a's registry record is corrupt"},
		{name: "not ready", n: node("a", notReady), why: placement.NotReady, msg: "a not ready"},
		{name: "not ready before cordoned", n: node("a", notReady, cordoned), why: placement.NotReady, msg: "a not ready"},
		{name: "cordoned", n: node("a", cordoned), why: placement.Cordoned, msg: "a cordoned"},
		{name: "cordoned before full", n: node("a", cordoned, holding(3, 3)), why: placement.Cordoned, msg: "a cordoned"},
		{name: "engine unavailable", n: node("a", engine("True")), why: placement.EngineUnavailable, msg: "a's container engine unavailable since 03:04:05Z"},
		{name: "engine condition false", n: node("a", engine("False"))},
		{name: "engine before full", n: node("a", engine("True"), holding(3, 3)), why: placement.EngineUnavailable},
		{name: "full", n: node("a", holding(3, 3)), why: placement.Full, msg: "a full (3/3)"},
		{name: "over full", n: node("a", holding(4, 3)), why: placement.Full, msg: "a full (4/3)"},
		{name: "engine cpu", n: node("a", (func(n *shoalv1.Node) { n.EngineCpuMillis = 2000 })), res: res(3000, 0),
			why: placement.ExceedsResources, msg: "a's engine has 2 CPUs: sandbox.spec.resources.cpu_millis up to 2000, not 3000"},
		{name: "engine cpu equal", n: node("a", (func(n *shoalv1.Node) { n.EngineCpuMillis = 2000 })), res: res(2000, 0)},
		{name: "engine memory", n: node("a", (func(n *shoalv1.Node) { n.EngineMemoryBytes = 1 << 30 })), res: res(0, 2<<30),
			why: placement.ExceedsResources, msg: "a's engine has 1073741824 bytes of memory: sandbox.spec.resources.memory_bytes up to that, not 2147483648"},
		{name: "max cpu", n: node("a", (func(n *shoalv1.Node) { n.MaxCpuMillis = 500 })), res: res(1000, 0),
			why: placement.ExceedsResources, msg: "a allows sandbox.spec.resources.cpu_millis up to 500 (its --sandbox-max-cpu-millis), not 1000"},
		{name: "max memory", n: node("a", (func(n *shoalv1.Node) { n.MaxMemoryBytes = 256 << 20 })), res: res(0, 512<<20),
			why: placement.ExceedsResources, msg: "a allows sandbox.spec.resources.memory_bytes up to 268435456 (its --sandbox-max-memory-mib), not 536870912"},
		{name: "engine before node maximum", n: node("a", (func(n *shoalv1.Node) { n.EngineCpuMillis, n.MaxCpuMillis = 1000, 500 })), res: res(2000, 0),
			why: placement.ExceedsResources, msg: "a's engine has 1 CPUs"},
		{name: "no request asks nothing", n: node("a", (func(n *shoalv1.Node) { n.MaxCpuMillis, n.MaxMemoryBytes = 1, 1 }))},
		{name: "full before resources", n: node("a", holding(1, 1), (func(n *shoalv1.Node) { n.MaxCpuMillis = 1 })), res: res(5, 0), why: placement.Full},
		{name: "selector met", n: node("a", label("gpu", "a100"), label("zone", "x")), req: placement.Request{Selector: map[string]string{"gpu": "a100"}}},
		{name: "selector value differs", n: node("a", label("gpu", "h100")), req: placement.Request{Selector: map[string]string{"gpu": "a100"}},
			why: placement.LacksLabel, msg: "a lacks label gpu=a100"},
		{name: "selector first missing key in order", n: node("a"), req: placement.Request{Selector: map[string]string{"zone": "x", "gpu": "a100"}},
			why: placement.LacksLabel, msg: "a lacks label gpu=a100"},
		{name: "resources before labels", n: node("a", (func(n *shoalv1.Node) { n.MaxCpuMillis = 1 })), res: res(5, 0),
			req: placement.Request{Selector: map[string]string{"gpu": "a100"}}, why: placement.ExceedsResources},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, skip := placement.Skip(tc.n, tc.req, tc.res)
			if skip != (tc.why != 0) || r.Why != tc.why {
				t.Fatalf("Skip = %+v, %v; want why %v", r, skip, tc.why)
			}
			if !skip {
				return
			}
			if r.Node != tc.n.Name || !strings.HasPrefix(r.Msg, tc.msg) {
				t.Errorf("reason %+v, want node %q and a message starting %q", r, tc.n.Name, tc.msg)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	nodes := []*shoalv1.Node{
		node("a", cordoned),
		node("b", holding(2, 2)),
		node("c", label("gpu", "a100")),
		node("d", notReady),
		node("e", label("gpu", "a100"), holding(1, 4)),
	}
	names := func(ns []*shoalv1.Node) string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name string
		req  placement.Request
		fit  string // names in order; "" when refused
		err  string // the refusal's message
		why  []placement.Why
	}{
		{name: "all that fit, in order", fit: "c,e"},
		{name: "selector", req: placement.Request{Selector: map[string]string{"gpu": "a100"}}, fit: "c,e"},
		{name: "pinned", req: placement.Request{Node: "e"}, fit: "e"},
		{name: "pinned and selected", req: placement.Request{Node: "c", Selector: map[string]string{"gpu": "a100"}}, fit: "c"},
		{name: "pinned cordoned", req: placement.Request{Node: "a"}, err: "no node fits: a cordoned", why: []placement.Why{placement.Cordoned}},
		{name: "pinned unknown", req: placement.Request{Node: "zz"}, err: `node "zz" is not known; ` + "`shoal node list` shows the nodes"},
		{name: "none has the label names each node", req: placement.Request{Selector: map[string]string{"gpu": "h100"}},
			err: "no node fits: a cordoned, b full (2/2), c lacks label gpu=h100, d not ready, e lacks label gpu=h100",
			why: []placement.Why{placement.Cordoned, placement.Full, placement.LacksLabel, placement.NotReady, placement.LacksLabel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit, err := placement.Filter(nodes, tc.req, nil)
			if tc.err == "" {
				if err != nil || names(fit) != tc.fit {
					t.Fatalf("Filter = %s, %v; want %s", names(fit), err, tc.fit)
				}
				return
			}
			if err == nil || err.Error() != tc.err {
				t.Fatalf("Filter = %s, %v; want the error %q", names(fit), err, tc.err)
			}
			if shoal.KindOf(err) != shoal.KindFailedPrecondition || !errors.Is(err, shoal.ErrFailedPrecondition) {
				t.Errorf("kind %v, want FAILED_PRECONDITION", shoal.KindOf(err))
			}
			var nf *placement.NoFitError
			if !errors.As(err, &nf) || nf.Pinned != tc.req.Node || len(nf.Reasons) != len(tc.why) {
				t.Fatalf("error %#v, want a NoFitError pinned %q with %d reasons", err, tc.req.Node, len(tc.why))
			}
			for i, r := range nf.Reasons {
				if r.Why != tc.why[i] || !strings.HasPrefix(r.Msg, r.Node) {
					t.Errorf("reason %d: %+v, want why %v and a message naming its node", i, r, tc.why[i])
				}
			}
		})
	}
	t.Run("none registered", func(t *testing.T) {
		_, err := placement.Filter(nil, placement.Request{}, nil)
		if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "no node has registered") {
			t.Fatalf("Filter of no nodes: %v", err)
		}
	})
	t.Run("does not change its input", func(t *testing.T) {
		in := []*shoalv1.Node{node("x"), node("y", cordoned)}
		if _, err := placement.Filter(in, placement.Request{}, nil); err != nil || in[0].Name != "x" || in[1].Name != "y" || len(in) != 2 {
			t.Fatalf("Filter changed its input: %v %v", in, err)
		}
	})
}
