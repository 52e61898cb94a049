package engine

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// HostNetwork is what the host's network namespace looks like to this
// process: one line per interface, with its flags and addresses. Two
// snapshots taken around a run that starts engines must be equal.
type HostNetwork []string

// SnapshotHostNetwork reads the interfaces of the calling process's
// network namespace.
func SnapshotHostNetwork() (HostNetwork, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("host interfaces: %w", err)
	}
	var out HostNetwork
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		as := make([]string, len(addrs))
		for k, a := range addrs {
			as[k] = a.String()
		}
		slices.Sort(as)
		up := "down"
		if i.Flags&net.FlagUp != 0 {
			up = "up"
		}
		out = append(out, fmt.Sprintf("%s %s [%s]", i.Name, up, strings.Join(as, " ")))
	}
	slices.Sort(out)
	return out, nil
}

// Lost lists the interfaces of h that are gone from now or changed (flags
// or addresses), a line each; none when nothing was lost. Container veth
// ends come and go with containers that other tests start on the system
// engine, and so do the br-<id> bridges of its user-defined networks (the
// chaos hosts', compose's, the bridge tests'), which tests in other
// packages create and remove while this one runs: neither is compared, nor
// are new interfaces. docker0 and every other host interface are.
func (h HostNetwork) Lost(now HostNetwork) []string {
	var lost []string
	for _, l := range h {
		if strings.HasPrefix(l, "veth") || strings.HasPrefix(l, "br-") {
			continue
		}
		if !slices.Contains(now, l) {
			lost = append(lost, l)
		}
	}
	return lost
}
