package testenv_test

import (
	"strings"
	"testing"

	"shoal/internal/engine"
	"shoal/internal/testenv"
)

// hostNetworkUnchanged snapshots the host's interfaces now and, when the
// test ends (after every cleanup registered later, engines included),
// fails it if any of them is gone or changed.
func hostNetworkUnchanged(t *testing.T) engine.HostNetwork {
	t.Helper()
	before, err := engine.SnapshotHostNetwork()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		after, err := engine.SnapshotHostNetwork()
		if err != nil {
			t.Error(err)
			return
		}
		if lost := before.Lost(after); len(lost) > 0 {
			t.Errorf("the host's network changed under the test (engines must run in namespaces of their own); gone or changed:\n  %s", strings.Join(lost, "\n  "))
		}
	})
	return before
}

// Private engines run dockerd with --bridge none, which deletes the
// docker0 of the network namespace it runs in. They must leave the host's
// interfaces (the system engine's docker0 among them) as they found them,
// while they run and after they are gone.
func TestPrivateEnginesLeaveTheHostNetworkAlone(t *testing.T) {
	before := hostNetworkUnchanged(t)
	hasDocker0 := false
	for _, l := range before {
		hasDocker0 = hasDocker0 || strings.HasPrefix(l, "docker0 ")
	}
	if !hasDocker0 {
		t.Logf("the host has no docker0 before the test (was it deleted earlier? recreate it: ip link add docker0 type bridge; ip addr add 172.17.0.1/16 dev docker0; ip link set docker0 up); the test still compares every other interface")
	}
	t.Run("engines", func(t *testing.T) {
		es := testenv.StartEngines(t, "net-a", "net-b")
		if es[0].Shared {
			t.Skip("no private engines here: nothing to check")
		}
		// While they run, too: the harm was done at dockerd's start.
		now, err := engine.SnapshotHostNetwork()
		if err != nil {
			t.Fatal(err)
		}
		if lost := before.Lost(now); len(lost) > 0 {
			t.Fatalf("two private engines running changed the host's network:\n  %s", strings.Join(lost, "\n  "))
		}
	})
}
