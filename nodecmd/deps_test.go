package nodecmd_test

import (
	"regexp"
	"strings"
	"testing"

	"shoal/internal/testenv"
)

// serverSide matches what only a node runs: shoal's server packages, the
// etcd server and the Docker client. Package cli is a client of the API
// and links none of them; this package brings them into `shoal`.
var serverSide = regexp.MustCompile(`^shoal/(apiserver|agent|node|store|coordinator|embedetcd|docker|hollow|registry|lease)$|^go\.etcd\.io/etcd/server/|^github\.com/docker/`)

// The CLI depends on the API alone (issue 22): no package that cli or
// cmd/shoal links, directly or through another, is a server's. The server
// binary, cmd/shoal-node, does link them, through this package, which
// shows the pattern matches.
func TestCLILinksNoServer(t *testing.T) {
	for _, pkg := range []string{"shoal/cli", "shoal/cmd/shoal"} {
		var found []string
		for _, p := range testenv.Deps(t, pkg) {
			if serverSide.MatchString(p) {
				found = append(found, p)
			}
		}
		if len(found) > 0 {
			t.Errorf("%s links server packages (commands that need them belong in nodecmd): %s", pkg, strings.Join(found, " "))
		}
	}
	want := map[string]bool{"shoal/nodecmd": false, "shoal/node": false, "shoal/apiserver": false, "shoal/embedetcd": false, "shoal/docker": false}
	for _, p := range testenv.Deps(t, "shoal/cmd/shoal-node") {
		if _, ok := want[p]; ok {
			want[p] = true
		}
	}
	for p, ok := range want {
		if !ok {
			t.Errorf("cmd/shoal-node does not link %s", p)
		}
	}
}
