package egress

import (
	"encoding"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"shoal"
)

// The documented bounds of a policy (an API server refuses more, naming
// the rule). They keep a policy a few KiB in etcd and its matching a
// bounded loop on every connection.
const (
	MaxRules        = 64  // rules in a policy
	MaxHostBytes    = 253 // a rule's host: a DNS name's longest form, or an IP or CIDR
	MaxPortsPerRule = 16
	MaxCIDRsPerRule = 16
	// DefaultPort is a rule's port when it names none: TLS, the egress an
	// agent needs for an inference API or a git host.
	DefaultPort = 443
)

// Mode is how a policy is applied. The zero Mode is ModeEnforce.
type Mode int

const (
	// ModeEnforce refuses every connection no rule admits.
	ModeEnforce Mode = iota
	// ModeAudit admits every connection, and reports the ones enforce
	// would have refused as VerdictAudit: for learning a policy, not for
	// running one (it is no protection at all, SSRF included).
	ModeAudit
)

func (m Mode) String() string {
	switch m {
	case ModeEnforce:
		return "enforce"
	case ModeAudit:
		return "audit"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode reads "enforce" or "audit" (any case); "" is enforce.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "", "enforce":
		return ModeEnforce, nil
	case "audit":
		return ModeAudit, nil
	}
	return 0, shoal.Invalid("egress.mode", "%q is not a mode: enforce or audit", s)
}

// MarshalText and UnmarshalText make a Mode "enforce" or "audit" in JSON
// and YAML (sigs.k8s.io/yaml goes through JSON).
func (m Mode) MarshalText() ([]byte, error) {
	if m != ModeEnforce && m != ModeAudit {
		return nil, fmt.Errorf("egress: invalid mode %d", int(m))
	}
	return []byte(m.String()), nil
}

func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Rule admits connections to Host on one of Ports.
//
// Host is one of:
//   - a DNS name, matched exactly and case-insensitively (a trailing dot
//     is ignored): api.nvidia.com;
//   - *.example.com: exactly one label before .example.com (a.example.com,
//     not example.com, not a.b.example.com);
//   - **.example.com: one or more labels before .example.com;
//   - an IP address (172.17.0.1, ::1): requests naming that address;
//   - a CIDR (10.0.0.0/8): requests naming an address inside it. A CIDR
//     host matches addresses a client names, not the addresses names
//     resolve to: for a name whose addresses must lie in a range, give
//     the name and the range in CIDRs.
//
// An IP or CIDR host also admits that address or range past the SSRF
// check, as CIDRs does.
type Rule struct {
	Host string `json:"host"`
	// Ports the rule admits; none is [DefaultPort].
	Ports []uint16 `json:"ports,omitempty"`
	// CIDRs, when any, are where the host's resolved address must lie.
	// An address inside one of them passes the SSRF check whatever its
	// class (loopback, private, link-local, the node's own), so a rule
	// names the internal service it allows, and nothing else internal
	// becomes reachable. They are taken literally: 0.0.0.0/0 disables the
	// SSRF check for the rule's host.
	CIDRs []netip.Prefix `json:"cidrs,omitempty"`
}

// Policy is a sandbox's egress policy. No rules is no egress (the sandbox
// keeps its network mode none and gets no proxy).
type Policy struct {
	Rules []Rule `json:"rules,omitempty"`
	Mode  Mode   `json:"mode,omitempty"`
	// Version is the policy's version in the store (the sandbox record's
	// revision that set it): every decision carries it, so that an
	// admission can be checked against the writes that preceded it.
	Version int64 `json:"version,omitempty"`
}

// hostKind is what a rule's host is, decided once by parsing it.
type hostKind int

const (
	hostName   hostKind = iota // exact DNS name
	hostOne                    // *.suffix
	hostMany                   // **.suffix
	hostAddr                   // IP address
	hostPrefix                 // CIDR
)

// parsedHost is a validated rule host: its kind, its normalised name
// (lower case, no trailing dot; for globs the suffix with its leading
// dot), or its address or prefix.
type parsedHost struct {
	kind   hostKind
	name   string
	addr   netip.Addr
	prefix netip.Prefix
}

// parseHost validates a rule's host and says what it is. The messages
// name what is wrong; callers prefix the rule.
func parseHost(h string) (parsedHost, error) {
	if h == "" {
		return parsedHost{}, fmt.Errorf("empty host")
	}
	if len(h) > MaxHostBytes {
		return parsedHost{}, fmt.Errorf("host is %d bytes, at most %d", len(h), MaxHostBytes)
	}
	if strings.Contains(h, "/") {
		p, err := netip.ParsePrefix(h)
		if err != nil {
			return parsedHost{}, fmt.Errorf("bad CIDR %q: %v", h, trimParseErr(err))
		}
		if p != p.Masked() {
			return parsedHost{}, fmt.Errorf("CIDR %s has host bits set: did you mean %s?", h, p.Masked())
		}
		return parsedHost{kind: hostPrefix, prefix: p}, nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return parsedHost{}, fmt.Errorf("address %s has a zone: not allowed", h)
		}
		return parsedHost{kind: hostAddr, addr: a.Unmap()}, nil
	} else if strings.Contains(h, ":") {
		return parsedHost{}, fmt.Errorf("bad IPv6 address %q: %v", h, trimParseErr(err))
	}
	kind := hostName
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	switch {
	case strings.HasPrefix(name, "**."):
		kind, name = hostMany, name[2:]
	case strings.HasPrefix(name, "*."):
		kind, name = hostOne, name[1:]
	}
	check := name
	if kind != hostName {
		check = name[1:] // the suffix after the wildcard's dot
	}
	if strings.Contains(check, "*") {
		return parsedHost{}, fmt.Errorf("bad glob %q: a wildcard is a whole first label, *.example.com (one label) or **.example.com (one or more)", h)
	}
	if err := checkDNSName(check); err != nil {
		if kind != hostName && check == "" {
			return parsedHost{}, fmt.Errorf("bad glob %q: a wildcard needs a domain after it, *.example.com", h)
		}
		return parsedHost{}, fmt.Errorf("bad host %q: %v", h, err)
	}
	return parsedHost{kind: kind, name: name}, nil
}

// checkDNSName accepts a lower-case name of labels of letters, digits,
// hyphens and underscores (which real hosts use), 1-63 bytes each.
func checkDNSName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return fmt.Errorf("empty label")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q is longer than 63 bytes", label)
		}
		for _, c := range []byte(label) {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case c >= 0x80:
				return fmt.Errorf("non-ASCII name: give its punycode (xn--) form")
			default:
				return fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	// No top-level domain is all digits: 300.1.1.1 or 10.0.0 is a mistyped
	// address, and a resolver would read it as one (inet_aton's forms).
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("the last label %q is all digits: not an IP address and not a DNS name", last)
	}
	return nil
}

// Normalized is the rule as shoal stores it: the host in its canonical
// form (lower case, no trailing dot, addresses unmapped), ports sorted
// without repeats ([DefaultPort] when none), CIDRs sorted without
// repeats. The error says what is wrong, without naming the rule (as
// Validate's do once prefixed).
func (r Rule) Normalized() (Rule, error) {
	ph, err := parseHost(r.Host)
	if err != nil {
		return Rule{}, err
	}
	n := Rule{Host: ph.String()}
	n.Ports = slices.Clone(r.Ports)
	if len(n.Ports) == 0 {
		n.Ports = []uint16{DefaultPort}
	}
	slices.Sort(n.Ports)
	n.Ports = slices.Compact(n.Ports)
	if len(r.CIDRs) > 0 {
		n.CIDRs = slices.Clone(r.CIDRs)
		slices.SortFunc(n.CIDRs, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		n.CIDRs = slices.Compact(n.CIDRs)
	}
	if err := n.validate(); err != nil {
		return Rule{}, err
	}
	return n, nil
}

// Equal reports whether two normalised rules are the same rule.
func (r Rule) Equal(o Rule) bool {
	return r.Host == o.Host && slices.Equal(r.Ports, o.Ports) && slices.Equal(r.CIDRs, o.CIDRs)
}

// trimParseErr drops netip's repetition of the input from its message.
func trimParseErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "): "); i >= 0 {
		return s[i+3:]
	}
	return s
}

// Validate checks a rule alone; the error says what is wrong, without the
// rule (ValidateRule and Policy.Validate name it).
func (r Rule) validate() error {
	if _, err := parseHost(r.Host); err != nil {
		return err
	}
	if len(r.Ports) > MaxPortsPerRule {
		return fmt.Errorf("%d ports, at most %d", len(r.Ports), MaxPortsPerRule)
	}
	for _, p := range r.Ports {
		if p == 0 {
			return fmt.Errorf("port 0 is not a port")
		}
	}
	if len(r.CIDRs) > MaxCIDRsPerRule {
		return fmt.Errorf("%d CIDRs, at most %d", len(r.CIDRs), MaxCIDRsPerRule)
	}
	for _, c := range r.CIDRs {
		if !c.IsValid() {
			return fmt.Errorf("invalid CIDR")
		}
		if c != c.Masked() {
			return fmt.Errorf("CIDR %s has host bits set: did you mean %s?", c, c.Masked())
		}
	}
	return nil
}

// Validate checks a whole policy: at most MaxRules rules, each valid, a
// known mode. The error is a shoal KindInvalid error naming the rule
// (egress.rules[i]) and what is wrong with it.
func (p Policy) Validate() error {
	if len(p.Rules) > MaxRules {
		return shoal.Invalid("egress.rules", "%d rules, at most %d", len(p.Rules), MaxRules)
	}
	if p.Mode != ModeEnforce && p.Mode != ModeAudit {
		return shoal.Invalid("egress.mode", "%s is not a mode: enforce or audit", p.Mode)
	}
	for i, r := range p.Rules {
		if err := r.validate(); err != nil {
			return shoal.Invalid(fmt.Sprintf("egress.rules[%d]", i), "%q: %v", r.Host, err)
		}
	}
	return nil
}

// ParseRule reads a rule of the CLI's syntax HOST[:PORT[,PORT...]]:
// api.nvidia.com:443, '*.github.com' (port 443), 172.17.0.1:8080,
// 10.0.0.0/8:443, [::1]:8080, [fd00::/8]:443. A bare IPv6 address or
// CIDR without brackets takes no port (::1 is port 443). The rule it
// returns is normalised (lower case, ports sorted without repeats, port
// 443 filled in); its String gives the same syntax back.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, shoal.Invalid(fmt.Sprintf("egress rule %q", s), "%v", err)
	}
	return r, nil
}

func parseRule(s string) (Rule, error) {
	if strings.TrimSpace(s) != s {
		return Rule{}, fmt.Errorf("spaces around the rule")
	}
	host, ports := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Rule{}, fmt.Errorf("no ] after [")
		}
		host, ports = s[1:end], s[end+1:]
		if ports != "" {
			if ports[0] != ':' {
				return Rule{}, fmt.Errorf("%q after ]: want :PORT", ports)
			}
			ports = ports[1:]
			if ports == "" {
				return Rule{}, fmt.Errorf("empty port after ':'")
			}
		}
		if !strings.Contains(host, ":") {
			return Rule{}, fmt.Errorf("brackets are for IPv6 addresses, not %q", host)
		}
	case strings.Count(s, ":") > 1:
		// A bare IPv6 address or CIDR: no room for a port.
		if _, err := netip.ParseAddr(s); err != nil {
			if _, err := netip.ParsePrefix(s); err != nil {
				return Rule{}, fmt.Errorf("bad IPv6 address %q (an IPv6 address with a port goes in brackets: [::1]:8080)", s)
			}
		}
	default:
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, ports = s[:i], s[i+1:]
			if ports == "" {
				return Rule{}, fmt.Errorf("empty port after ':'")
			}
		}
	}
	r := Rule{Host: host}
	ph, err := parseHost(host)
	if err != nil {
		return Rule{}, err
	}
	r.Host = ph.String()
	if ports == "" {
		r.Ports = []uint16{DefaultPort}
	} else {
		for p := range strings.SplitSeq(ports, ",") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return Rule{}, fmt.Errorf("bad port %q: a port is 1-65535", p)
			}
			r.Ports = append(r.Ports, uint16(n))
		}
		slices.Sort(r.Ports)
		r.Ports = slices.Compact(r.Ports)
	}
	if err := r.validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// String is a parsed host's canonical form.
func (h parsedHost) String() string {
	switch h.kind {
	case hostOne:
		return "*" + h.name
	case hostMany:
		return "**" + h.name
	case hostAddr:
		return h.addr.String()
	case hostPrefix:
		return h.prefix.String()
	}
	return h.name
}

// String gives the rule in the CLI's syntax, HOST:PORT[,PORT...]
// (IPv6 in brackets), followed by its CIDRs, if any, in parentheses:
// those have no CLI syntax (a policy file carries them).
func (r Rule) String() string {
	var b strings.Builder
	if strings.Contains(r.Host, ":") {
		b.WriteString("[" + r.Host + "]")
	} else {
		b.WriteString(r.Host)
	}
	ports := r.Ports
	if len(ports) == 0 {
		ports = []uint16{DefaultPort}
	}
	for i, p := range ports {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	if len(r.CIDRs) > 0 {
		b.WriteString(" (cidrs")
		for _, c := range r.CIDRs {
			b.WriteString(" " + c.String())
		}
		b.WriteString(")")
	}
	return b.String()
}

var (
	_ encoding.TextMarshaler   = ModeEnforce
	_ encoding.TextUnmarshaler = (*Mode)(nil)
)
