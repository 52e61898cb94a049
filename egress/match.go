package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Match returns the first rule that admits a connection to host:port
// before any resolution: host is what the client asked for (a name or an
// IP literal, without brackets). ok is false when no rule matches. The
// resolved address is checked afterwards, by Allowed; a connection needs
// one matching rule whose Allowed admits the address (MatchAll lists
// every candidate).
func (p Policy) Match(host string, port uint16) (rule int, ok bool) {
	for i := range p.Rules {
		if p.Rules[i].matches(host, port) {
			return i, true
		}
	}
	return -1, false
}

// MatchAll returns the indexes of every rule matching host:port, in order.
func (p Policy) MatchAll(host string, port uint16) []int {
	var out []int
	for i := range p.Rules {
		if p.Rules[i].matches(host, port) {
			out = append(out, i)
		}
	}
	return out
}

func (r Rule) matches(host string, port uint16) bool {
	if len(r.Ports) == 0 {
		if port != DefaultPort {
			return false
		}
	} else if !slices.Contains(r.Ports, port) {
		return false
	}
	h, err := parseHost(r.Host)
	if err != nil {
		return false // Validate refuses it; an unvalidated policy admits nothing by it
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		switch h.kind {
		case hostAddr:
			return a == h.addr
		case hostPrefix:
			return h.prefix.Contains(a)
		}
		return false
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	switch h.kind {
	case hostName:
		return name == h.name
	case hostOne:
		// one label: a non-empty label with no dot, then the suffix
		label, ok := strings.CutSuffix(name, h.name)
		return ok && label != "" && !strings.Contains(label, ".")
	case hostMany:
		label, ok := strings.CutSuffix(name, h.name)
		return ok && label != "" && !strings.HasPrefix(label, ".") && !strings.HasSuffix(label, ".") && !strings.Contains(label, "..")
	}
	return false
}

// Class is what an address is, for the SSRF check: only ClassPublic
// passes without a rule's CIDR naming it.
type Class int

const (
	ClassPublic      Class = iota
	ClassLoopback          // 127.0.0.0/8, ::1
	ClassLinkLocal         // 169.254.0.0/16 (the cloud metadata address 169.254.169.254), fe80::/10
	ClassPrivate           // RFC 1918, 100.64.0.0/10 (CGNAT), fc00::/7 (ULA)
	ClassNodeOwn           // an address of the node's own interfaces
	ClassUnspecified       // 0.0.0.0/8, :: (0.0.0.0 reaches the node's loopback on Linux)
	ClassMulticast         // 224.0.0.0/4, ff00::/8
	ClassReserved          // 240.0.0.0/4 and broadcast, 198.18.0.0/15, IPv4-compatible ::/96, invalid
)

func (c Class) String() string {
	switch c {
	case ClassPublic:
		return "public"
	case ClassLoopback:
		return "loopback"
	case ClassLinkLocal:
		return "link-local"
	case ClassPrivate:
		return "private"
	case ClassNodeOwn:
		return "the node's own"
	case ClassUnspecified:
		return "unspecified"
	case ClassMulticast:
		return "multicast"
	case ClassReserved:
		return "reserved"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	benchNet  = netip.MustParsePrefix("198.18.0.0/15")
	classE    = netip.MustParsePrefix("240.0.0.0/4") // includes 255.255.255.255
	v4compat  = netip.MustParsePrefix("::/96")       // deprecated IPv4-compatible IPv6
	nat64Addr = netip.MustParsePrefix("64:ff9b::/96")
)

// Classify says what ip is. IPv4-mapped IPv6 addresses (::ffff:127.0.0.1)
// are classified as the IPv4 address they carry, and so are NAT64 ones
// (64:ff9b::/96): a sandbox cannot dress a loopback address up as a
// public one. nodeAddrs are the node's own addresses.
func Classify(ip netip.Addr, nodeAddrs []netip.Addr) Class {
	ip = ip.Unmap()
	if ip.Is6() && nat64Addr.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case !ip.IsValid():
		return ClassReserved
	case ip.IsUnspecified() || (ip.Is4() && thisNet.Contains(ip)):
		return ClassUnspecified
	case ip.IsLoopback():
		return ClassLoopback
	}
	if slices.ContainsFunc(nodeAddrs, func(a netip.Addr) bool { return a.Unmap() == ip.WithZone("") }) {
		return ClassNodeOwn
	}
	switch {
	case ip.IsMulticast():
		return ClassMulticast
	case ip.IsLinkLocalUnicast():
		return ClassLinkLocal
	case ip.IsPrivate() || (ip.Is4() && cgnat.Contains(ip)):
		return ClassPrivate
	case ip.Is4() && (classE.Contains(ip) || benchNet.Contains(ip)),
		ip.Is6() && v4compat.Contains(ip):
		return ClassReserved
	}
	return ClassPublic
}

// Allowed is the check after resolution: may a connection that rule
// matched go to ip? The rule's ranges are its CIDRs and, for an IP or CIDR
// host, that address or prefix. With ranges, ip must lie in one of them,
// and then passes whatever its class, but for unspecified, multicast and
// reserved addresses, which are never a destination. Without ranges, ip
// must be public (ClassPublic): the SSRF check. reason says why not.
func (p Policy) Allowed(ip netip.Addr, rule int, nodeAddrs []netip.Addr) (ok bool, reason string) {
	if rule < 0 || rule >= len(p.Rules) {
		return false, "no rule"
	}
	r := p.Rules[rule]
	ip = ip.Unmap().WithZone("")
	class := Classify(ip, nodeAddrs)
	switch class {
	case ClassUnspecified, ClassMulticast, ClassReserved:
		return false, fmt.Sprintf("%s resolves to %s address %s", r.Host, class, ip)
	}
	ranges := r.CIDRs
	if h, err := parseHost(r.Host); err == nil {
		switch h.kind {
		case hostAddr:
			ranges = append(slices.Clip(ranges), netip.PrefixFrom(h.addr, h.addr.BitLen()))
		case hostPrefix:
			ranges = append(slices.Clip(ranges), h.prefix)
		}
	}
	if len(ranges) > 0 {
		for _, c := range ranges {
			if c.Contains(ip) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("address %s is outside rule %d's CIDRs", ip, rule)
	}
	if class != ClassPublic {
		return false, fmt.Sprintf("address %s is %s (SSRF); a rule's CIDR must name it", ip, class)
	}
	return true, ""
}
