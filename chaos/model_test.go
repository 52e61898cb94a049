package chaos

import (
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"

	shoalv1 "shoal/api/shoal/v1"
)

func TestSandboxModelSteps(t *testing.T) {
	m := sandboxModel
	step := func(s lzState, kind, arg string, o lzOutput) []any { return m.Step(s, lzInput{kind, arg}, o) }
	ok := lzOutput{Code: "OK"}
	// A get after a write must see it.
	live := lzState{Exists: true, Writes: "w1=1.1"}
	next := step(live, "sandbox-label", "w2=2.1", ok)
	if len(next) != 1 || next[0].(lzState).Writes != "w1=1.1,w2=2.1" {
		t.Fatalf("label: %v", next)
	}
	if got := step(next[0].(lzState), "sandbox-get", "", lzOutput{Code: "OK", Exists: true, Writes: "w1=1.1"}); len(got) != 0 {
		t.Fatalf("a get missing a write was accepted: %v", got)
	}
	next = step(next[0].(lzState), "sandbox-status", "s9=9.1", ok)
	if len(next) != 1 || next[0].(lzState).Writes != "s9=9.1,w1=1.1,w2=2.1" {
		t.Fatalf("status: %v", next)
	}
	// A DELETING sandbox may vanish before any op.
	del := lzState{Exists: true, Deleting: true}
	if got := step(del, "sandbox-get", "", lzOutput{Code: "NotFound"}); len(got) != 1 {
		t.Fatalf("vanished DELETING record not allowed: %v", got)
	}
	// A live one may not.
	if got := step(live, "sandbox-get", "", lzOutput{Code: "NotFound"}); len(got) != 0 {
		t.Fatalf("live record vanished: %v", got)
	}
	// A DELETING one is frozen: a write cannot land on it.
	if got := step(del, "sandbox-status", "s9=9.2", ok); len(got) != 0 {
		t.Fatalf("write on a DELETING record accepted: %v", got)
	}
	// An ambiguous create may or may not have happened.
	if got := step(lzState{}, "sandbox-create", "", lzOutput{Code: "Unavailable", Ambiguous: true}); len(got) != 2 {
		t.Fatalf("ambiguous create: %v", got)
	}
	// A write refused as "being deleted" needs a DELETING record.
	for _, kind := range []string{"sandbox-label", "sandbox-status"} {
		if got := step(live, kind, "w1=1.2", lzOutput{Code: "FailedPrecondition"}); len(got) != 0 {
			t.Fatalf("%s: refusal on a live record accepted: %v", kind, got)
		}
	}
	// A stop is seen by every later get, and a start undoes it; the
	// writers' keys are kept through both.
	next = step(live, "sandbox-stop", "", ok)
	if len(next) != 1 || !next[0].(lzState).Stopped || next[0].(lzState).Writes != live.Writes {
		t.Fatalf("stop: %v", next)
	}
	stopped := next[0].(lzState)
	if got := step(stopped, "sandbox-get", "", lzOutput{Code: "OK", Exists: true, Writes: live.Writes}); len(got) != 0 {
		t.Fatalf("a get that missed an acknowledged stop was accepted: %v", got)
	}
	if got := step(stopped, "sandbox-start", "", ok); len(got) != 1 || got[0].(lzState).Stopped {
		t.Fatalf("start: %v", got)
	}
	// Refusals: a start of a sandbox meant to run (phase ERROR) may be
	// refused, of a stopped one only while it is being deleted; a stop
	// only while it is being deleted.
	if got := step(live, "sandbox-start", "", lzOutput{Code: "FailedPrecondition"}); len(got) != 1 {
		t.Fatalf("start refused on a sandbox meant to run: %v", got)
	}
	if got := step(stopped, "sandbox-start", "", lzOutput{Code: "FailedPrecondition"}); len(got) != 0 {
		t.Fatalf("start refused on a live stopped sandbox accepted: %v", got)
	}
	if got := step(live, "sandbox-stop", "", lzOutput{Code: "FailedPrecondition"}); len(got) != 0 {
		t.Fatalf("stop refused on a live sandbox accepted: %v", got)
	}
	if got := step(del, "sandbox-stop", "", ok); len(got) != 0 {
		t.Fatalf("stop accepted on a DELETING record: %v", got)
	}
	// An ambiguous stop may or may not have happened.
	if got := step(live, "sandbox-stop", "", lzOutput{Code: "Unavailable", Ambiguous: true}); len(got) != 2 {
		t.Fatalf("ambiguous stop: %v", got)
	}
}

// hop is one op of a hand-written history.
type hop struct {
	client      int
	kind, arg   string
	call, ret   int64
	code        string
	writes      string
	deleting    bool
	ambiguousTo bool // ambiguous: may take effect until the end (1000)
}

func check(t *testing.T, hist []hop) porcupine.CheckResult {
	t.Helper()
	var ops []porcupine.Operation
	for _, h := range hist {
		o := lzOutput{Code: h.code, Writes: h.writes, Deleting: h.deleting, Exists: h.code == "OK" && h.kind == "sandbox-get"}
		ret := h.ret
		if h.ambiguousTo {
			o.Ambiguous, ret = true, 1000
		}
		ops = append(ops, porcupine.Operation{ClientId: h.client, Input: lzInput{h.kind, h.arg}, Call: h.call, Return: ret, Output: o})
	}
	res, _ := porcupine.CheckOperationsVerbose(sandboxModel.ToModel(), ops, 0)
	return res
}

func TestSandboxModelHistories(t *testing.T) {
	create := hop{client: 0, kind: "sandbox-create", call: 0, ret: 1, code: "OK"}
	for _, tc := range []struct {
		name string
		hist []hop
		want porcupine.CheckResult
	}{{
		// Two overlapping label writes of different writers' keys, both
		// acknowledged: a later get must see both.
		name: "both writes seen",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, ret: 5, code: "OK"},
			{client: 2, kind: "sandbox-label", arg: "w2=2.1", call: 3, ret: 6, code: "OK"},
			{client: 3, kind: "sandbox-get", call: 7, ret: 8, code: "OK", writes: "w1=1.1,w2=2.1"},
		},
		want: porcupine.Ok,
	}, {
		// The lost update: writer 2's read-modify-write started from a
		// record without writer 1's key and rewrote it whole.
		name: "lost label write",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, ret: 5, code: "OK"},
			{client: 2, kind: "sandbox-label", arg: "w2=2.1", call: 3, ret: 6, code: "OK"},
			{client: 3, kind: "sandbox-get", call: 7, ret: 8, code: "OK", writes: "w2=2.1"},
		},
		want: porcupine.Illegal,
	}, {
		// A status write through the store reverted by a label write.
		name: "lost status write",
		hist: []hop{create,
			{client: 9, kind: "sandbox-status", arg: "s9=9.1", call: 2, ret: 4, code: "OK"},
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 3, ret: 6, code: "OK"},
			{client: 1, kind: "sandbox-get", call: 7, ret: 8, code: "OK", writes: "w1=1.1"},
		},
		want: porcupine.Illegal,
	}, {
		// A reverted key stays reverted until its writer writes again: a
		// get long after the loss still catches it.
		name: "revert seen later",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, ret: 3, code: "OK"},
			{client: 1, kind: "sandbox-label", arg: "w1=1.2", call: 4, ret: 5, code: "OK"},
			{client: 2, kind: "sandbox-label", arg: "w2=2.1", call: 6, ret: 7, code: "OK"},
			{client: 2, kind: "sandbox-label", arg: "w2=2.2", call: 8, ret: 9, code: "OK"},
			{client: 3, kind: "sandbox-get", call: 20, ret: 21, code: "OK", writes: "w1=1.1,w2=2.2"},
		},
		want: porcupine.Illegal,
	}, {
		// An ambiguous write may take effect late, even after its
		// writer's next write.
		name: "ambiguous write applied late",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, code: "Unavailable", ambiguousTo: true},
			{client: 1, kind: "sandbox-label", arg: "w1=1.2", call: 4, ret: 5, code: "OK"},
			{client: 3, kind: "sandbox-get", call: 6, ret: 7, code: "OK", writes: "w1=1.2"},
			{client: 3, kind: "sandbox-get", call: 8, ret: 9, code: "OK", writes: "w1=1.1"},
		},
		want: porcupine.Ok,
	}, {
		// ... but only once.
		name: "ambiguous write applied twice",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, code: "Unavailable", ambiguousTo: true},
			{client: 1, kind: "sandbox-label", arg: "w1=1.2", call: 4, ret: 5, code: "OK"},
			{client: 3, kind: "sandbox-get", call: 6, ret: 7, code: "OK", writes: "w1=1.1"},
			{client: 3, kind: "sandbox-get", call: 8, ret: 9, code: "OK", writes: "w1=1.2"},
			{client: 3, kind: "sandbox-get", call: 10, ret: 11, code: "OK", writes: "w1=1.1"},
		},
		want: porcupine.Illegal,
	}, {
		// A deleted record keeps its keys while DELETING, then vanishes;
		// writes are refused meanwhile.
		name: "frozen while deleting",
		hist: []hop{create,
			{client: 1, kind: "sandbox-label", arg: "w1=1.1", call: 2, ret: 3, code: "OK"},
			{client: 2, kind: "sandbox-delete", call: 4, ret: 5, code: "OK"},
			{client: 1, kind: "sandbox-label", arg: "w1=1.2", call: 6, ret: 7, code: "FailedPrecondition"},
			{client: 3, kind: "sandbox-get", call: 8, ret: 9, code: "OK", writes: "w1=1.1", deleting: true},
			{client: 3, kind: "sandbox-get", call: 10, ret: 11, code: "NotFound"},
		},
		want: porcupine.Ok,
	}, {
		name: "write landed on a DELETING record",
		hist: []hop{create,
			{client: 2, kind: "sandbox-delete", call: 4, ret: 5, code: "OK"},
			{client: 1, kind: "sandbox-label", arg: "w1=1.2", call: 6, ret: 7, code: "OK"},
		},
		want: porcupine.Illegal,
	}} {
		if got := check(t, tc.hist); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWritesEncoding(t *testing.T) {
	if got := setWrite(setWrite(setWrite("", "w2=2.1"), "s10=10.1"), "w1=1.1"); got != "s10=10.1,w1=1.1,w2=2.1" {
		t.Fatalf("setWrite order: %q", got)
	}
	if got := setWrite("s10=10.1,w1=1.1,w2=2.1", "w1=1.2"); got != "s10=10.1,w1=1.2,w2=2.1" {
		t.Fatalf("setWrite replace: %q", got)
	}
	sb := &shoalv1.Sandbox{
		Meta:   &shoalv1.ObjectMeta{Labels: map[string]string{"w2": "2.1", "w1": "1.1", "team": "ml", "wx": "no"}},
		Status: &shoalv1.SandboxStatus{Conditions: []*shoalv1.Condition{{Type: "ContainerPresent", Message: "x"}}},
	}
	setStatusWrite(sb, statusKey(10), "10.1")
	setStatusWrite(sb, statusKey(10), "10.2")
	// The canonical form of what a get returns is what the model's writes
	// build, whatever order they came in; labels and conditions that no
	// writer owns are not part of it.
	want := setWrite(setWrite(setWrite("", "w1=1.1"), "s10=10.2"), "w2=2.1")
	if got := observedWrites(sb); got != want {
		t.Fatalf("observedWrites: %q, want %q", got, want)
	}
	if n := len(sb.Status.Conditions); n != 2 {
		t.Fatalf("a status writer's condition was added twice: %d conditions", n)
	}
	if labelKey(3) != "w3" || labelKey(3+maxLabelKeys) != "w3" {
		t.Fatalf("label keys: %s %s", labelKey(3), labelKey(3+maxLabelKeys))
	}
}

// An ambiguous write that no get observed is left out of the history the
// checker sees, and leaving it out changes no verdict; one that a get
// observed stays.
func TestPartitionDropsUnobservedAmbiguousWrites(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "sandbox-create", Name: "a", Call: 0, Return: 1, Code: "OK"},
		{Client: 1, Kind: "sandbox-label", Name: "a", Arg: "w1=1.1", Call: 2, Return: 3, Code: "Unavailable"},
		{Client: 2, Kind: "sandbox-label", Name: "a", Arg: "w2=2.1", Call: 2, Return: 3, Code: "DeadlineExceeded"},
		{Client: 3, Kind: "sandbox-get", Name: "a", Call: 4, Return: 5, Code: "Unavailable"},
		{Client: 3, Kind: "sandbox-get", Name: "a", Call: 6, Return: 7, Code: "OK", Exists: true, Writes: "w2=2.1"},
	}
	h := partitionHistory(ops, 10)["a"]
	var kept []string
	for _, o := range h {
		kept = append(kept, o.Input.(lzInput).Kind+" "+o.Input.(lzInput).Arg)
		if o.Output.(lzOutput).Ambiguous && o.Return != 11 {
			t.Errorf("ambiguous op returns at %d, not after the end", o.Return)
		}
	}
	want := []string{"sandbox-create ", "sandbox-label w2=2.1", "sandbox-get "}
	if !slices.Equal(kept, want) {
		t.Fatalf("kept %q, want %q", kept, want)
	}
	if v, _ := checkLinearizable(ops, "s", t.TempDir(), 10, 0); len(v) != 0 {
		t.Fatalf("sound history: %v", v)
	}
	// The observed ambiguous write may apply only once: seen, overwritten
	// by its writer, then seen again is a violation.
	ops = append(ops,
		Op{Client: 2, Kind: "sandbox-label", Name: "a", Arg: "w2=2.2", Call: 8, Return: 9, Code: "OK"},
		Op{Client: 3, Kind: "sandbox-get", Name: "a", Call: 10, Return: 11, Code: "OK", Exists: true, Writes: "w2=2.1"})
	if v, _ := checkLinearizable(ops, "s", t.TempDir(), 12, 0); len(v) != 1 {
		t.Fatalf("a write applied twice was accepted: %v", v)
	}
}
