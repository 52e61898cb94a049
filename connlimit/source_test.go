package connlimit

import (
	"net"
	"testing"
)

// A source is an IPv4 address, or an IPv6 /64 (one host may hold a whole
// /64); an IPv4-mapped IPv6 address is its IPv4 address.
func TestSource(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 4000}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.7"), Port: 4000}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 4000}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9"), Port: 4001}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "/run/x.sock"},
	} {
		if got := source(tc.addr); got != tc.want {
			t.Errorf("source(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
