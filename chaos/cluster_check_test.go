package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/store"
)

// The checkers of the cluster invariants pass clean histories and fail
// bad ones, on inputs written by hand.

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ctr(id, node, uid, state string) container.Summary {
	return container.Summary{ID: id, State: state, Labels: map[string]string{
		docker.LabelManaged: "true", docker.LabelNode: node, docker.LabelUID: uid}}
}

func list(node string, start time.Duration, cs ...container.Summary) engineList {
	return engineList{node: node, start: at(start), end: at(start + 10*time.Millisecond), containers: cs}
}

func TestOneRunningChecker(t *testing.T) {
	s := NewEngineSampler(nil, "", 0)
	ms := time.Millisecond
	// Clean: a uid running on one engine and paused on another (a node
	// that froze a copy), a shared engine listing the same container
	// under two nodes, a stopped second container.
	s.observe([]engineList{
		list("n1", 0, ctr("a1", "n1", "A", "running"), ctr("b1", "n1", "B", "running")),
		list("n2", 0, ctr("a2", "n2", "A", "paused"), ctr("b2", "n2", "B", "exited")),
	})
	s.observe([]engineList{
		list("n1", 200*ms, ctr("s1", "n1", "S", "running")),
		list("n2", 200*ms, ctr("s1", "n1", "S", "running")), // the same container: a shared engine
	})
	if v := s.Violations("x"); len(v) != 0 {
		t.Fatalf("clean rounds: %v", v)
	}
	// Bad: uid A runs on both engines for two rounds, then one pauses.
	for i := range 2 {
		d := time.Duration(400+200*i) * ms
		s.observe([]engineList{
			list("n1", d, ctr("a1", "n1", "A", "running")),
			list("n2", d, ctr("a2", "n2", "A", "running")),
		})
	}
	s.observe([]engineList{
		list("n1", 800*ms, ctr("a1", "n1", "A", "running")),
		list("n2", 800*ms, ctr("a2", "n2", "A", "paused")),
	})
	// Bad: two running containers of one uid on one engine, still at the end.
	s.observe([]engineList{list("n1", time.Second, ctr("c1", "n1", "C", "running"), ctr("c2", "n1", "C", "running"))})
	s.closeAll()
	v := s.Violations("x")
	if len(v) != 2 || v[0].Invariant != invOneRunning {
		t.Fatalf("want 2 violations of 8, got %v", v)
	}
	if !strings.Contains(v[0].Detail, "uid A") || !strings.Contains(v[0].Detail, "n1/a1") || !strings.Contains(v[0].Detail, "n2/a2") ||
		!strings.Contains(v[0].Detail, "2 sample(s)") {
		t.Errorf("detail of A: %s", v[0].Detail)
	}
	if !strings.Contains(v[1].Detail, "uid C") {
		t.Errorf("detail of C: %s", v[1].Detail)
	}
	f := s.Figures()
	if f.Rounds != 6 || f.MaxContainers != 4 || f.MaxRunning != 2 {
		t.Errorf("figures: %+v", f)
	}
	// The timeline counts each node's own containers.
	tl := s.Timeline()
	if got := tl["n2"][0]; got.Running != 0 || got.Paused != 1 || !got.OK {
		t.Errorf("n2's first sample: %+v", got)
	}
	if got := tl["n2"][1]; got.Running != 0 {
		t.Errorf("a container labelled n1 counted for n2: %+v", got)
	}
}

// fenceCase builds a node's samples: running r from..to (every 200ms), with
// the containers paused once frozenAt passed (zero: never).
func samples(from, to, frozenAt time.Duration, n int) []NodeSample {
	var out []NodeSample
	for d := from; d < to; d += 200 * time.Millisecond {
		s := NodeSample{Start: at(d), End: at(d + 20*time.Millisecond), OK: true}
		if frozenAt != 0 && d >= frozenAt {
			s.Paused = n
		} else {
			s.Running = n
			for i := range n {
				s.RunningUIDs = append(s.RunningUIDs, fmt.Sprintf("u%d", i))
			}
		}
		out = append(out, s)
	}
	return out
}

func TestCutOffFencingChecker(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	margin := 2 * s
	// n1 registered at 0, lease gone at 10s.
	reg := func(evs ...RegEvent) map[string][]RegEvent { return map[string][]RegEvent{"n1": evs} }
	present := RegEvent{At: at(0), Present: true, Initial: true}
	gone := RegEvent{At: at(10 * s)}
	back := func(d time.Duration) RegEvent { return RegEvent{At: at(d), Present: true} }
	for _, tc := range []struct {
		name    string
		reg     map[string][]RegEvent
		samples []NodeSample
		alive   []Window
		bad     bool
		frozen  time.Duration // the measured fence time (-1: not frozen)
	}{{
		name: "froze 300ms after expiry", reg: reg(present, gone),
		samples: samples(0, 20*s, 10*s+300*ms, 2), frozen: 420 * ms,
	}, {
		name: "froze before expiry", reg: reg(present, gone),
		samples: samples(0, 20*s, 9*s, 2), frozen: 20 * ms,
	}, {
		name: "never froze", reg: reg(present, gone),
		samples: samples(0, 20*s, 0, 2), bad: true, frozen: -1,
	}, {
		name: "froze just past the margin", reg: reg(present, gone),
		samples: samples(0, 20*s, 12*s+400*ms, 1), bad: true, frozen: 2*s + 420*ms,
	}, {
		name: "registered again within the margin", reg: reg(present, gone, back(11*s)),
		samples: samples(0, 20*s, 0, 2), frozen: -1,
	}, {
		// The thaw races the registration's delivery: tolerated within slack.
		name: "thawed just before the registration was delivered", reg: reg(present, gone, back(13*s)),
		samples: append(samples(0, 11*s, 10*s+200*ms, 1), samples(12*s+600*ms, 20*s, 0, 1)...), frozen: 220 * ms,
	}, {
		name: "registered again late, running all along", reg: reg(present, gone, back(15*s)),
		samples: samples(0, 20*s, 0, 2), bad: true, frozen: -1,
	}, {
		// SIGKILL at 9s: its containers run on while it is dead.
		name: "killed", reg: reg(present, gone),
		samples: samples(0, 20*s, 0, 2), alive: []Window{{To: at(9 * s)}}, frozen: -1,
	}, {
		// A graceful stop revokes the lease: containers run on by design.
		name: "graceful stop", reg: reg(present, gone),
		samples: samples(0, 20*s, 0, 2), alive: []Window{{To: at(10*s - 10*ms)}}, frozen: -1,
	}, {
		// SIGSTOP at 9s, SIGCONT at 15s: the clock starts at the resume.
		name: "stopped across its expiry, froze once resumed", reg: reg(present, gone),
		samples: samples(0, 20*s, 15*s+500*ms, 2), alive: []Window{{To: at(9 * s)}, {From: at(15 * s)}}, frozen: 620 * ms,
	}, {
		name: "stopped across its expiry, never froze once resumed", reg: reg(present, gone),
		samples: samples(0, 20*s, 0, 2), alive: []Window{{To: at(9 * s)}, {From: at(15 * s)}}, bad: true, frozen: -1,
	}, {
		// Absent when the watch started and alive: the clock starts then.
		name: "lost before the watch started", reg: reg(RegEvent{At: at(10 * s), Initial: true}),
		samples: samples(0, 20*s, 0, 1), bad: true, frozen: -1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			alive := map[string][]Window{}
			if tc.alive != nil {
				alive["n1"] = tc.alive
			}
			v, fig := CheckCutOffFencing("x", FencingInput{Registry: tc.reg, Samples: map[string][]NodeSample{"n1": tc.samples},
				Alive: alive, Margin: margin, End: at(20 * s)})
			if got := len(v) > 0; got != tc.bad {
				t.Fatalf("violations %v, want bad=%v; episodes %+v", v, tc.bad, fig.Episodes)
			}
			for _, x := range v {
				if x.Invariant != invCutOffFenced {
					t.Fatalf("invariant %s", x.Invariant)
				}
			}
			if tc.frozen < 0 {
				for _, ep := range fig.Episodes {
					if ep.Frozen {
						t.Fatalf("episode %+v frozen", ep)
					}
				}
				return
			}
			if fig.Worst != tc.frozen || fig.WorstNode != "n1" {
				t.Fatalf("worst fence time %s on %q, want %s; episodes %+v", fig.Worst, fig.WorstNode, tc.frozen, fig.Episodes)
			}
		})
	}
}

// kv builds a watch event.
func event(del bool, key string, val []byte, rev, version int64) *clientv3.Event {
	typ := mvccpb.PUT
	if del {
		typ = mvccpb.DELETE
	}
	return &clientv3.Event{Type: typ, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: val, ModRevision: rev, CreateRevision: rev, Version: version}}
}

func sandboxValue(t *testing.T, name, uid, node string) []byte {
	t.Helper()
	b, err := proto.Marshal(&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: "default", Name: name, Uid: uid, CreatedAt: timestamppb.Now()},
		Spec: &shoalv1.SandboxSpec{Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nodeValue(t *testing.T, name string, max int32) []byte {
	t.Helper()
	b, err := proto.Marshal(&shoalv1.Node{Name: name, MaxSandboxes: max})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeyspaceChecks(t *testing.T) {
	const p = "/shoal"
	w := NewKeyspaceWatch(nil, p)
	w.now = func() time.Time { return t0 }
	sb := func(name, uid, node string) []byte { return sandboxValue(t, name, uid, node) }
	// Two nodes with room for one sandbox each.
	w.deliver([]*clientv3.Event{
		event(false, p+"/nodeinfo/n1", nodeValue(t, "n1", 1), 2, 1),
		event(false, p+"/nodes/n1", nil, 2, 1),
		event(false, p+"/nodeinfo/n2", nodeValue(t, "n2", 1), 3, 1),
		event(false, p+"/nodes/n2", nil, 3, 1),
	})
	// Clean: a create takes the slot in its own revision; a status write
	// rewrites the record; the removal frees the slot; the next create
	// takes it again.
	w.deliver([]*clientv3.Event{
		event(false, p+"/sandboxes/default/a", sb("a", "ua", "n1"), 4, 1),
		event(false, p+"/placed/n1/0", []byte("default/a/ua"), 4, 1),
	})
	w.deliver([]*clientv3.Event{event(false, p+"/sandboxes/default/a", sb("a", "ua", "n1"), 5, 2)})
	w.deliver([]*clientv3.Event{
		event(true, p+"/sandboxes/default/a", nil, 6, 0),
		event(true, p+"/placed/n1/0", nil, 6, 0),
		event(false, p+"/sandboxes/default/b", sb("b", "ub", "n1"), 7, 1),
		event(false, p+"/placed/n1/0", []byte("default/b/ub"), 7, 1),
	})
	if v := w.Violations("x"); len(v) != 0 {
		t.Fatalf("clean history: %v", v)
	}
	// Over capacity: a second create on n1 without its slot compare
	// overwrote b's slot.
	w.deliver([]*clientv3.Event{
		event(false, p+"/sandboxes/default/c", sb("c", "uc", "n1"), 8, 1),
		event(false, p+"/placed/n1/0", []byte("default/c/uc"), 8, 2),
	})
	v := w.Violations("x")
	if len(v) != 2 || v[0].Invariant != invCapacity || v[1].Invariant != invCapacity ||
		!strings.Contains(v[0].Detail, "held 2 sandboxes, over its max_sandboxes 1") || !strings.Contains(v[1].Detail, "default/b/ub holds no slot") {
		t.Fatalf("over capacity: %v", v)
	}
	// A persisting mismatch is reported once.
	w.deliver([]*clientv3.Event{event(false, p+"/sandboxes/default/c", sb("c", "uc", "n1"), 9, 2)})
	if n := len(w.Violations("x")); n != 2 {
		t.Fatalf("a persisting mismatch was reported again: %d violations", n)
	}
	// Placed on a node whose lease is gone.
	w.deliver([]*clientv3.Event{event(true, p+"/nodes/n2", nil, 10, 0)})
	w.deliver([]*clientv3.Event{
		event(false, p+"/sandboxes/default/d", sb("d", "ud", "n2"), 11, 1),
		event(false, p+"/placed/n2/0", []byte("default/d/ud"), 11, 1),
	})
	v = w.Violations("x")
	if len(v) != 3 || v[2].Invariant != invPlacedReady || !strings.Contains(v[2].Detail, "default/d/ud") || !strings.Contains(v[2].Detail, "rev 11") {
		t.Fatalf("placed on a NotReady node: %v", v)
	}
	// The registry changes, stamped.
	reg := w.Registry()
	if evs := reg["n2"]; len(evs) != 2 || !evs[0].Present || evs[1].Present || evs[1].Rev != 10 || !evs[1].At.Equal(t0) {
		t.Fatalf("n2's registry events: %+v", evs)
	}
	f := w.Figures()
	if f.Creates != 4 || f.MaxPlaced["n1"] != 2 || f.Capacity["n1"] != 1 {
		t.Fatalf("figures: %+v", f)
	}
}

func TestConvergenceGaps(t *testing.T) {
	ready := func(sb *shoalv1.Sandbox, ph shoalv1.SandboxPhase) *shoalv1.Sandbox {
		sb.Status = &shoalv1.SandboxStatus{Phase: ph}
		return sb
	}
	sbx := func(name, uid, node string, provs ...string) *shoalv1.Sandbox {
		return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: "default", Name: name, Uid: uid},
			Spec: &shoalv1.SandboxSpec{Node: node, Providers: provs}}
	}
	clean := func() convergenceState {
		return convergenceState{
			ready:   map[string]bool{"n1": true, "n2": true},
			members: []memberState{{name: "n1", id: 1, url: "http://a"}, {name: "n2", id: 2, url: "http://b"}},
			sandboxes: []*shoalv1.Sandbox{
				ready(sbx("a", "ua", "n1", "p"), shoalv1.SandboxPhase_READY),
				ready(sbx("b", "ub", "n2"), shoalv1.SandboxPhase_STOPPED),
				ready(sbx("c", "uc", "n2"), shoalv1.SandboxPhase_ERROR),
			},
			providers: []*shoalv1.Provider{{Meta: &shoalv1.ObjectMeta{Workspace: "default", Name: "p"}}},
			attach:    []store.Attachment{{Workspace: "default", Provider: "p", Sandbox: "a", UID: "ua"}},
			containers: []engineContainer{
				{"n1", ctr("a1", "n1", "ua", "running")},
				{"n2", ctr("b1", "n2", "ub", "exited")},
			},
		}
	}
	nodes := []string{"n1", "n2"}
	if g := clean().gaps(nodes, nodes); len(g) != 0 {
		t.Fatalf("clean state: %q", g)
	}
	for _, tc := range []struct {
		name   string
		break_ func(*convergenceState)
		want   string
	}{
		{"node not ready", func(s *convergenceState) { delete(s.ready, "n2") }, "node n2 is not Ready"},
		{"learner", func(s *convergenceState) { s.members[1].learner = true }, "etcd member n2 is still a learner"},
		{"member down", func(s *convergenceState) { s.members[0].err = "connection refused" }, "etcd member n1 (http://a) is not healthy"},
		{"member not started", func(s *convergenceState) { s.members[1].url, s.members[1].name = "", "" }, "etcd member 2 has not started"},
		{"unknown", func(s *convergenceState) { s.sandboxes[0].Status.Phase = shoalv1.SandboxPhase_UNKNOWN }, "sandbox default/a is UNKNOWN"},
		{"deleting", func(s *convergenceState) { s.sandboxes[1].Meta.DeletionTimestamp = timestamppb.Now() }, "sandbox default/b is still being deleted"},
		{"provisioning", func(s *convergenceState) { s.sandboxes[2].Status.Phase = shoalv1.SandboxPhase_PROVISIONING }, "sandbox default/c is PROVISIONING"},
		{"orphan", func(s *convergenceState) {
			s.containers = append(s.containers, engineContainer{"n2", ctr("x1", "n2", "ux", "running")})
		}, "container x1 (uid ux, labelled node n2) on the engine of node n2 has no sandbox record"},
		{"wrong engine", func(s *convergenceState) { s.containers[1].engine = "n1" }, "belongs to sandbox default/b of node n2"},
		{"missing container", func(s *convergenceState) { s.containers = s.containers[:1] }, "sandbox default/b (STOPPED) has 0 containers"},
		{"two containers", func(s *convergenceState) {
			s.containers = append(s.containers, engineContainer{"n1", ctr("a2", "n1", "ua", "exited")})
		}, "sandbox default/a (READY) has 2 containers"},
		{"paused", func(s *convergenceState) { s.containers[0].c.State = "paused" }, "of sandbox default/a is paused"},
		{"stray attach key", func(s *convergenceState) { s.attach[0].UID = "old" }, "attach key default/p/a (uid old) is held by no sandbox"},
		{"release key left", func(s *convergenceState) { s.attach[0].Releasing = true }, "release key default/p/a is left"},
		{"terminating provider", func(s *convergenceState) { s.providers[0].Meta.DeletionTimestamp = timestamppb.Now() }, "provider default/p is still terminating"},
	} {
		st := clean()
		tc.break_(&st)
		g := st.gaps(nodes, nodes)
		if !strings.Contains(strings.Join(g, "\n"), tc.want) {
			t.Errorf("%s: gaps %q lack %q", tc.name, g, tc.want)
		}
	}
}

func TestLiveness(t *testing.T) {
	l := NewLiveness()
	l.Down("n1", at(time.Second)) // SIGSTOP
	l.Down("n1", at(2*time.Second))
	l.Up("n1", at(3*time.Second)) // SIGCONT
	l.Up("n1", at(4*time.Second))
	l.Down("n1", at(5*time.Second)) // SIGKILL
	l.Up("n1", at(6*time.Second))   // restarted
	l.Up("n2", at(time.Second))     // never down: one open window from then
	w := l.Windows()
	want := []Window{{To: at(time.Second)}, {From: at(3 * time.Second), To: at(5 * time.Second)}, {From: at(6 * time.Second)}}
	if fmt.Sprint(w["n1"]) != fmt.Sprint(want) {
		t.Fatalf("n1: %v, want %v", w["n1"], want)
	}
	if _, ok := w["n3"]; ok {
		t.Fatal("a node never reported has windows")
	}
}
