package docker_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"shoal/docker"
	"shoal/internal/testenv"
)

// With --sandbox-network bridge a sandbox is on the bridge network shoal
// makes, with traffic between containers off: the network is a bridge with
// enable_icc false, the container has an address on it (and on no other
// network, never the host's), a listener in one sandbox answers this host
// but not another sandbox, and the container keeps the rest of its
// hardening.
func TestBridgeNetworkSandboxes(t *testing.T) {
	dc := testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := docker.New(ctx, docker.Config{Node: node, Cluster: "bridge", Network: docker.NetworkBridge})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	nw, err := dc.NetworkInspect(ctx, docker.BridgeNetwork, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nw.Driver != "bridge" || nw.Options["com.docker.network.bridge.enable_icc"] != "false" {
		t.Fatalf("network %s: driver %q, options %v", docker.BridgeNetwork, nw.Driver, nw.Options)
	}
	listener := spec("listener")
	listener.Command = []string{"sh", "-c", "while true; do echo hello | nc -l -p 7000; done"}
	lid, err := r.Run(ctx, listener)
	if err != nil {
		t.Fatal(err)
	}
	in, err := dc.ContainerInspect(ctx, lid)
	if err != nil {
		t.Fatal(err)
	}
	if in.HostConfig.NetworkMode.NetworkName() != docker.BridgeNetwork || in.Config.NetworkDisabled || in.HostConfig.Privileged {
		t.Fatalf("network mode %q, disabled %v, privileged %v", in.HostConfig.NetworkMode, in.Config.NetworkDisabled, in.HostConfig.Privileged)
	}
	if len(in.NetworkSettings.Networks) != 1 || in.NetworkSettings.Networks[docker.BridgeNetwork] == nil {
		t.Fatalf("networks %v, want %s only", in.NetworkSettings.Networks, docker.BridgeNetwork)
	}
	ip := in.NetworkSettings.Networks[docker.BridgeNetwork].IPAddress
	if net.ParseIP(ip) == nil {
		t.Fatalf("no address on %s: %q", docker.BridgeNetwork, ip)
	}
	// This host reaches the listener (so it listens)...
	testenv.Eventually(t, time.Minute, "the listener answers this host at "+ip+":7000", func() (bool, error) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "7000"), 2*time.Second)
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 5)
		n, err := c.Read(buf)
		return string(buf[:n]) == "hello", err
	})
	// ... and another sandbox on the same network does not.
	prober := spec("prober")
	prober.Command = []string{"sleep", "600"}
	pid, err := r.Run(ctx, prober)
	if err != nil {
		t.Fatal(err)
	}
	out, code, err := execOut(ctx, r, pid, "sh", "-c", "nc -w 3 "+ip+" 7000 </dev/null && echo reached")
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 || strings.Contains(out, "reached") || strings.Contains(out, "hello") {
		t.Fatalf("a sandbox reached another on the bridge network (exit %d): %s", code, out)
	}
}
