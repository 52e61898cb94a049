package hosts

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// maxNodes bounds the nodes of a run, replacements included: node k has
// the subnet's address 10+k, which fits any subnet Docker hands out.
const maxNodes = 200

// privateNetwork is the run's bridge network: internal (its containers
// reach each other and this machine's address on the bridge, nothing
// beyond), on a subnet of its own that the run chose, so that every node
// can be given (and given back, on Reconnect) its address.
type privateNetwork struct {
	id, name string
	subnet   netip.Prefix
	gateway  netip.Addr // this machine's address on the bridge
}

// nodeAddr is node k's address on the network.
func (n privateNetwork) nodeAddr(k int) netip.Addr {
	a := n.subnet.Masked().Addr()
	for range 10 + k {
		a = a.Next()
	}
	return a
}

// createNetwork makes the run's network. A subnet Docker chose is free of
// the machine's routes and of other networks, but an address can be
// given to a container only on a subnet the network was created with: so
// a probe network learns a free subnet from Docker, and the run's network
// is made on it, again if someone took it meanwhile.
func createNetwork(ctx context.Context, sys *client.Client, name string, labels map[string]string) (privateNetwork, error) {
	var lastErr error
	for range 5 {
		probe, err := sys.NetworkCreate(ctx, name+"-probe", network.CreateOptions{Driver: "bridge", Internal: true, Labels: labels})
		if err != nil {
			return privateNetwork{}, fmt.Errorf("hosts: create a probe network: %w", err)
		}
		info, err := sys.NetworkInspect(ctx, probe.ID, network.InspectOptions{})
		if rerr := sys.NetworkRemove(ctx, probe.ID); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return privateNetwork{}, fmt.Errorf("hosts: probe network %s: %w", name+"-probe", err)
		}
		if len(info.IPAM.Config) == 0 {
			return privateNetwork{}, fmt.Errorf("hosts: Docker gave the probe network %s no subnet", name+"-probe")
		}
		subnet, err1 := netip.ParsePrefix(info.IPAM.Config[0].Subnet)
		gw, err2 := netip.ParseAddr(info.IPAM.Config[0].Gateway)
		if err1 != nil || err2 != nil || !subnet.Addr().Is4() || subnet.Bits() > 24 {
			return privateNetwork{}, fmt.Errorf("hosts: Docker gave the probe network subnet %q gateway %q: want an IPv4 /24 or larger",
				info.IPAM.Config[0].Subnet, info.IPAM.Config[0].Gateway)
		}
		resp, err := sys.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:   "bridge",
			Internal: true,
			Labels:   labels,
			IPAM:     &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String(), Gateway: gw.String()}}},
		})
		if err == nil {
			return privateNetwork{id: resp.ID, name: name, subnet: subnet, gateway: gw}, nil
		}
		if !strings.Contains(err.Error(), "overlap") {
			return privateNetwork{}, fmt.Errorf("hosts: create network %s on %s: %w", name, subnet, err)
		}
		lastErr = err
	}
	return privateNetwork{}, fmt.Errorf("hosts: create network %s: every free subnet was taken before it could be used: %w", name, lastErr)
}
