package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"shoal"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in    string
		host  string
		ports []uint16
		str   string
	}{
		{"api.nvidia.com:443", "api.nvidia.com", []uint16{443}, "api.nvidia.com:443"},
		{"api.nvidia.com", "api.nvidia.com", []uint16{443}, "api.nvidia.com:443"},
		{"API.Nvidia.COM.", "api.nvidia.com", []uint16{443}, "api.nvidia.com:443"},
		{"*.github.com", "*.github.com", []uint16{443}, "*.github.com:443"},
		{"**.github.com:443,80", "**.github.com", []uint16{80, 443}, "**.github.com:80,443"},
		{"h.test:8080,8080,22", "h.test", []uint16{22, 8080}, "h.test:22,8080"},
		{"172.17.0.1:8080", "172.17.0.1", []uint16{8080}, "172.17.0.1:8080"},
		{"10.0.0.0/8:443", "10.0.0.0/8", []uint16{443}, "10.0.0.0/8:443"},
		{"[::1]:8080", "::1", []uint16{8080}, "[::1]:8080"},
		{"[fd00::/8]:443", "fd00::/8", []uint16{443}, "[fd00::/8]:443"},
		{"::1", "::1", []uint16{443}, "[::1]:443"},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1", []uint16{80}, "127.0.0.1:80"},
		{"under_score.test", "under_score.test", []uint16{443}, "under_score.test:443"},
		{"h.test:65535", "h.test", []uint16{65535}, "h.test:65535"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRule(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Host != tc.host || !slices.Equal(r.Ports, tc.ports) {
				t.Fatalf("got %+v, want host %q ports %v", r, tc.host, tc.ports)
			}
			if s := r.String(); s != tc.str {
				t.Fatalf("String() = %q, want %q", s, tc.str)
			}
			again, err := ParseRule(r.String())
			if err != nil || again.Host != r.Host || !slices.Equal(again.Ports, r.Ports) {
				t.Fatalf("String() does not parse back: %+v, %v", again, err)
			}
		})
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty host"},
		{":443", "empty host"},
		{"a*.com", "bad glob"},
		{"*", "bad glob"},
		{"**", "bad glob"},
		{"*.", "bad glob"},
		{"*.*.com", "bad glob"},
		{"a.*.com", "bad glob"},
		{"foo.*", "bad glob"},
		{"h.test:0", "bad port"},
		{"h.test:65536", "bad port"},
		{"h.test:-1", "bad port"},
		{"h.test:", "empty port"},
		{"h.test:80,", "bad port"},
		{"h.test:http", "bad port"},
		{"h.test:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "17 ports"},
		{"10.0.0.1/8", "host bits set: did you mean 10.0.0.0/8"},
		{"10.0.0.0/33", "bad CIDR"},
		{"[::1", "no ]"},
		{"[::1]8080", "want :PORT"},
		{"[h.test]:80", "brackets are for IPv6"},
		{"::1:8080:x", "in brackets"},
		{"a..b", "empty label"},
		{"a b.test", "not allowed"},
		{" h.test", "spaces"},
		{"bücher.de", "punycode"},
		{strings.Repeat("a", 64) + ".test", "longer than 63"},
		{strings.Repeat("a.", 127) + "ab", "at most 253"},
		{"fe80::1%eth0", "zone"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseRule(tc.in)
			if err == nil {
				t.Fatalf("ParseRule(%q) = nil error, want %q", tc.in, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRule(%q) = %v, want it to say %q", tc.in, err, tc.want)
			}
			if !errors.Is(err, shoal.ErrInvalid) {
				t.Fatalf("not a KindInvalid error: %v", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("egress rule %q", tc.in)) {
				t.Fatalf("error does not name the rule: %v", err)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	ok := Policy{Rules: []Rule{{Host: "a.test", Ports: []uint16{443}}, {Host: "**.b.test", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	many := Policy{Rules: make([]Rule, MaxRules+1)}
	for i := range many.Rules {
		many.Rules[i] = Rule{Host: "a.test"}
	}
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{many, "egress.rules: 65 rules, at most 64"},
		{Policy{Mode: 7}, "egress.mode"},
		{Policy{Rules: []Rule{{Host: "a.test"}, {Host: "a*.test"}}}, "egress.rules[1]: \"a*.test\": bad glob"},
		{Policy{Rules: []Rule{{Host: "a.test", Ports: []uint16{0}}}}, "egress.rules[0]: \"a.test\": port 0"},
		{Policy{Rules: []Rule{{Host: "a.test", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/8")}}}}, "host bits set"},
		{Policy{Rules: []Rule{{Host: "a.test", CIDRs: []netip.Prefix{{}}}}}, "invalid CIDR"},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, shoal.ErrInvalid) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

func TestPolicyYAML(t *testing.T) {
	in := `
mode: audit
rules:
- host: api.nvidia.com
- host: "*.github.com"
  ports: [443, 22]
- host: internal.test
  ports: [8080]
  cidrs: [10.0.0.0/8, "fd00::/8"]
`
	var p Policy
	if err := yaml.UnmarshalStrict([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Mode != ModeAudit || len(p.Rules) != 3 || p.Rules[2].CIDRs[1] != netip.MustParsePrefix("fd00::/8") {
		t.Fatalf("got %+v", p)
	}
	out, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Policy
	if err := yaml.UnmarshalStrict(out, &back); err != nil {
		t.Fatal(err)
	}
	if back.Mode != p.Mode || back.Rules[2].String() != p.Rules[2].String() {
		t.Fatalf("round trip: %s -> %+v", out, back)
	}
	if err := yaml.UnmarshalStrict([]byte("mode: permissive\n"), &p); err == nil || !strings.Contains(err.Error(), "permissive") {
		t.Fatalf("bad mode: %v", err)
	}
	// The zero mode is enforce, and is left out.
	out, _ = yaml.Marshal(Policy{Rules: []Rule{{Host: "a.test"}}})
	if strings.Contains(string(out), "mode") {
		t.Fatalf("zero mode written: %s", out)
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.nvidia.com:443", "*.github.com", "**.a.b:1,2", "[::1]:8080", "10.0.0.0/8:443", "::1", "a*.com", "[fd00::/8]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		if err := (Policy{Rules: []Rule{r}}).Validate(); err != nil {
			t.Fatalf("ParseRule(%q) = %+v, which Validate refuses: %v", s, r, err)
		}
		again, err := ParseRule(r.String())
		if err != nil || again.Host != r.Host || !slices.Equal(again.Ports, r.Ports) {
			t.Fatalf("ParseRule(%q).String() = %q does not parse back: %+v, %v", s, r.String(), again, err)
		}
	})
}
