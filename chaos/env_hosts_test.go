package chaos

import (
	"context"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// After every voter the harness started with has been replaced (a soak's
// third member-loss cycle), the harness's own etcd client and API
// connections still answer: they follow the hosts (refreshEngines), and
// a call that would hang on the dead endpoints it was dialed with fails
// this test within its bound instead.
func TestHarnessFollowsReplacedMembers(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	cfg := DefaultConfig()
	cfg.Binary = testenv.Binary(t)
	cfg.Cluster = 3
	cfg.Scenarios = []string{"member-loss"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e, err := newEnv(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	for _, i := range []int{0, 1, 2} {
		j, err := e.hosts.ReplaceMember(ctx, i)
		if err != nil {
			t.Fatalf("replace voter %d: %v", i, err)
		}
		e.refreshEngines()
		if err := e.hosts.WaitServing(ctx, j); err != nil {
			t.Fatal(err)
		}
		t.Logf("voter %d replaced by node %d (%s)", i, j, e.hosts.ID(j))
	}
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	if _, err := e.raw.Get(cctx, "/shoal/cluster/id"); err != nil {
		t.Fatalf("the harness's etcd client after every original voter was replaced: %v", err)
	}
	if _, err := e.client.ListSandboxes(cctx, &shoalv1.ListSandboxesRequest{PageSize: 1}); err != nil {
		t.Fatalf("the harness's API client after every original voter was replaced: %v", err)
	}
	for id := range 3 {
		if _, err := e.clientFor(id).ListProviders(cctx, &shoalv1.ListProvidersRequest{PageSize: 1}); err != nil {
			t.Fatalf("traffic client %d after every original voter was replaced: %v", id, err)
		}
	}
}
