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
