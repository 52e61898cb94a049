package testenv

import (
	"net/netip"
	"testing"

	"shoal/egress"
)

// HostAddr is an IPv4 address of one of the host's interfaces other than
// loopback (docker0 at least): where the egress tests' upstreams stand in
// for the internet, reachable from a node's proxy and, from a sandbox,
// only through it.
func HostAddr(t testing.TB) netip.Addr {
	t.Helper()
	as, err := egress.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Is4() && !a.IsLoopback() {
			return a
		}
	}
	t.Fatal("the host has no IPv4 address but loopback")
	return netip.Addr{}
}
