package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func mustRules(t testing.TB, specs ...string) Policy {
	t.Helper()
	var p Policy
	for _, s := range specs {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Rules = append(p.Rules, r)
	}
	return p
}

func TestMatch(t *testing.T) {
	p := mustRules(t,
		"api.nvidia.com",      // 0
		"*.github.com:443,22", // 1
		"**.corp.test:8080",   // 2
		"172.17.0.1:8080",     // 3
		"10.0.0.0/8:443",      // 4
		"[fd00::1]:80",        // 5
	)
	p.Rules = append(p.Rules, Rule{Host: "noports.test"}) // 6: no ports is 443
	for _, tc := range []struct {
		host string
		port uint16
		rule int // -1: no match
	}{
		{"api.nvidia.com", 443, 0},
		{"API.NVIDIA.com.", 443, 0},
		{"api.nvidia.com", 80, -1},
		{"x.api.nvidia.com", 443, -1},
		{"nvidia.com", 443, -1},
		{"codeload.github.com", 443, 1},
		{"codeload.github.com", 22, 1},
		{"github.com", 443, -1},
		{"a.b.github.com", 443, -1},
		{"evilgithub.com", 443, -1},
		{"a.corp.test", 8080, 2},
		{"a.b.c.corp.test", 8080, 2},
		{"corp.test", 8080, -1},
		{"xcorp.test", 8080, -1},
		{"a.corp.test", 443, -1},
		{"172.17.0.1", 8080, 3},
		{"::ffff:172.17.0.1", 8080, 3},
		{"172.17.0.2", 8080, -1},
		{"10.1.2.3", 443, 4},
		{"11.1.2.3", 443, -1},
		{"fd00::1", 80, 5},
		{"fd00::2", 80, -1},
		{"noports.test", 443, 6},
		{"noports.test", 80, -1},
		{"", 443, -1},
	} {
		rule, ok := p.Match(tc.host, tc.port)
		if ok != (tc.rule >= 0) || (ok && rule != tc.rule) {
			t.Errorf("Match(%q, %d) = %d, %v; want %d", tc.host, tc.port, rule, ok, tc.rule)
		}
	}
}

func TestClassify(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")}
	for _, tc := range []struct {
		ip   string
		want Class
	}{
		{"8.8.8.8", ClassPublic},
		{"2606:4700::1111", ClassPublic},
		{"127.0.0.1", ClassLoopback},
		{"127.255.0.9", ClassLoopback},
		{"::1", ClassLoopback},
		{"::ffff:127.0.0.1", ClassLoopback},
		{"64:ff9b::7f00:1", ClassLoopback},
		{"169.254.169.254", ClassLinkLocal},
		{"::ffff:169.254.169.254", ClassLinkLocal},
		{"fe80::1", ClassLinkLocal},
		{"10.0.0.1", ClassPrivate},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.32.0.1", ClassPublic},
		{"192.168.1.1", ClassPrivate},
		{"100.64.0.1", ClassPrivate},
		{"fd12::1", ClassPrivate},
		{"203.0.113.7", ClassNodeOwn},
		{"::ffff:203.0.113.7", ClassNodeOwn},
		{"2001:db8::7", ClassNodeOwn},
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"::", ClassUnspecified},
		{"224.0.0.1", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"ff05::1", ClassMulticast},
		{"255.255.255.255", ClassReserved},
		{"240.0.0.1", ClassReserved},
		{"198.18.0.1", ClassReserved},
		{"::7f00:1", ClassReserved},
	} {
		if got := Classify(netip.MustParseAddr(tc.ip), own); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	p := mustRules(t, "public.test", "172.17.0.1:8080", "10.0.0.0/8:443", "[::1]:80")
	p.Rules = append(p.Rules, Rule{Host: "internal.test", Ports: []uint16{443}, CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	p.Rules = append(p.Rules, Rule{Host: "pub.test", CIDRs: []netip.Prefix{netip.MustParsePrefix("8.8.8.0/24")}})
	p.Rules = append(p.Rules, Rule{Host: "all.test", CIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	own := []netip.Addr{netip.MustParseAddr("203.0.113.7")}
	for _, tc := range []struct {
		ip     string
		rule   int
		ok     bool
		reason string
	}{
		{"8.8.8.8", 0, true, ""},
		{"127.0.0.1", 0, false, "loopback (SSRF)"},
		{"::ffff:127.0.0.1", 0, false, "loopback (SSRF)"},
		{"169.254.169.254", 0, false, "link-local (SSRF)"},
		{"10.0.0.5", 0, false, "private (SSRF)"},
		{"203.0.113.7", 0, false, "node's own (SSRF)"},
		{"0.0.0.0", 0, false, "unspecified"},
		{"172.17.0.1", 1, true, ""},
		{"172.17.0.2", 1, false, "outside rule 1's CIDRs"},
		{"10.9.9.9", 2, true, ""},
		{"::1", 3, true, ""},
		{"127.0.0.1", 4, true, ""},
		{"127.9.0.1", 4, true, ""},
		{"169.254.169.254", 4, false, "outside rule 4's CIDRs"},
		{"8.8.8.8", 4, false, "outside"},
		{"8.8.8.9", 5, true, ""},
		{"9.9.9.9", 5, false, "outside"},
		{"169.254.169.254", 6, true, ""}, // 0.0.0.0/0 is taken literally
		{"0.0.0.0", 6, false, "unspecified"},
		{"224.0.0.1", 6, false, "multicast"},
		{"8.8.8.8", 99, false, "no rule"},
	} {
		ok, reason := p.Allowed(netip.MustParseAddr(tc.ip), tc.rule, own)
		if ok != tc.ok || !strings.Contains(reason, tc.reason) {
			t.Errorf("Allowed(%s, rule %d) = %v %q, want %v %q", tc.ip, tc.rule, ok, reason, tc.ok, tc.reason)
		}
	}
}
