package chaos

import (
	"strings"
	"testing"
)

func TestGrowthBounds(t *testing.T) {
	base := Sample{Goroutines: 60, RSSBytes: 40 << 20, FDs: 16, Containers: 0, EtcdDBSize: 8 << 20}
	for _, tc := range []struct {
		name string
		s    Sample
		want string
	}{
		{"steady", base, ""},
		{"goroutine leak", Sample{Goroutines: 141, RSSBytes: base.RSSBytes, FDs: 16, EtcdDBSize: base.EtcdDBSize}, "goroutines"},
		{"rss", Sample{Goroutines: 60, RSSBytes: 125 << 20, FDs: 16, EtcdDBSize: base.EtcdDBSize}, "RSS"},
		{"fds", Sample{Goroutines: 60, RSSBytes: base.RSSBytes, FDs: 67, EtcdDBSize: base.EtcdDBSize}, "open fds"},
		{"containers", Sample{Goroutines: 60, RSSBytes: base.RSSBytes, FDs: 16, Containers: 1, EtcdDBSize: base.EtcdDBSize}, "containers"},
		{"etcd", Sample{Goroutines: 60, RSSBytes: base.RSSBytes, FDs: 16, EtcdDBSize: 81 << 20}, "etcd db"},
		{"within bounds", Sample{Goroutines: 140, RSSBytes: 124 << 20, FDs: 66, EtcdDBSize: 80 << 20}, ""},
	} {
		got := strings.Join(growthViolations(base, tc.s), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want mention of %q", tc.name, got, tc.want)
		}
	}
}

func TestSandboxModel(t *testing.T) {
	m := sandboxModel
	step := func(s lzState, kind, arg string, o lzOutput) []any { return m.Step(s, lzInput{kind, arg}, o) }
	ok := lzOutput{Code: "OK"}
	// A get after a label must see it.
	live := lzState{Exists: true}
	next := step(live, "sandbox-label", "v1", ok)
	if len(next) != 1 || next[0].(lzState).Flip != "v1" {
		t.Fatalf("label: %v", next)
	}
	if got := step(next[0].(lzState), "sandbox-get", "", lzOutput{Code: "OK", Flip: "v0"}); len(got) != 0 {
		t.Fatalf("a stale get was accepted: %v", got)
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
	// An ambiguous create may or may not have happened.
	if got := step(lzState{}, "sandbox-create", "", lzOutput{Code: "Unavailable", Ambiguous: true}); len(got) != 2 {
		t.Fatalf("ambiguous create: %v", got)
	}
	// A label refused as "being deleted" needs a DELETING record.
	if got := step(live, "sandbox-label", "v2", lzOutput{Code: "FailedPrecondition"}); len(got) != 0 {
		t.Fatalf("refusal on a live record accepted: %v", got)
	}
}
