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

// Each node is held to its own baseline, and a violation names the node.
func TestGrowthPerNode(t *testing.T) {
	r := &SoakResult{Samples: []Sample{
		{Cycle: 0, Node: "n0", Goroutines: 100, RSSBytes: 40 << 20, FDs: 20},
		{Cycle: 0, Node: "n1", Goroutines: 300, RSSBytes: 90 << 20, FDs: 30, EtcdDBSize: 2 << 20},
		{Cycle: 1, Node: "n0", Goroutines: 120, RSSBytes: 50 << 20, FDs: 19},
		{Cycle: 1, Node: "n1", Goroutines: 290, RSSBytes: 95 << 20, FDs: 31, EtcdDBSize: 3 << 20},
	}}
	nr := r.NodeRanges()
	if len(nr) != 2 || nr[0].Node != "n0" || nr[1].Node != "n1" {
		t.Fatalf("node ranges: %+v", nr)
	}
	if nr[0].Cycles != 2 || nr[0].Min.Goroutines != 100 || nr[0].Max.Goroutines != 120 || nr[0].Min.FDs != 19 || nr[0].Max.RSSBytes != 50<<20 {
		t.Errorf("n0's range: %+v", nr[0])
	}
	if nr[1].Min.Goroutines != 290 || nr[1].Max.EtcdDBSize != 3<<20 {
		t.Errorf("n1's range: %+v", nr[1])
	}
	// n1's 300 goroutines would be a leak against n0's baseline of 100,
	// not against its own.
	if g := growthViolations(r.Samples[1], r.Samples[3]); len(g) != 0 {
		t.Errorf("n1 within its own bounds: %v", g)
	}
	g := growthViolations(r.Samples[0], Sample{Node: "n0", Goroutines: 201, RSSBytes: 40 << 20, FDs: 20})
	if len(g) != 1 || !strings.HasPrefix(g[0], "node n0: goroutines 201") {
		t.Errorf("n0's leak: %v", g)
	}
	var sum strings.Builder
	r.WriteSummary(&sum)
	for _, want := range []string{"n0    2       100-120     40-50    19-20  0-0         -\n", "n1    2       290-300     90-95    30-31  0-0         2048-3072", "GROWTH PAST BOUND  0"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}
