package cli_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// i. --endpoint a,b,c with the first addresses down: commands work through
// the one that is up; a create carries a request id (a retry after a cut
// connection returns the same sandbox: store.TestCreateRetriedWithItsRequestID).
func TestEndpointListFailsOver(t *testing.T) {
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	down1 := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	down2 := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ep := down1 + "," + down2 + "," + n.Addr()
	run(t, bin, ep, "sandbox", "create", "via-list", "--wait").must(t, 0, "create through an endpoint list")
	r := run(t, bin, ep, "sandbox", "get", "via-list", "-o", "json").must(t, 0, "get through an endpoint list")
	var sb struct{ Meta struct{ Uid string } }
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil || sb.Meta.Uid == "" {
		t.Fatalf("get: %v\n%s", err, r.stdout)
	}
	run(t, bin, ep, "sandbox", "exec", "via-list", "--", "true").must(t, 0, "exec through an endpoint list")
	run(t, bin, ep, "sandbox", "delete", "via-list", "--wait").must(t, 0, "delete through an endpoint list")
	run(t, bin, down1+","+down2, "sandbox", "list").must(t, cli.ExitUnavailable, "every endpoint down")
}
