package nodecmd_test

import (
	"regexp"
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
	testenv.LinksNone(t, serverSide, "commands that need server packages belong in nodecmd", "shoal/cli", "shoal/cmd/shoal")
	testenv.LinksAll(t, "shoal/cmd/shoal-node", "shoal/nodecmd", "shoal/node", "shoal/apiserver", "shoal/embedetcd", "shoal/docker")
}
