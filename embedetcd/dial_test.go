package embedetcd_test

import (
	"fmt"
	"strings"
	"testing"

	"shoal/embedetcd"
	"shoal/internal/testenv"
)

// A client of several endpoints connects while any one answers, and
// fails naming every endpoint when none does.
func TestDialAnyEndpoint(t *testing.T) {
	_, srv := testenv.Etcd(t)
	dead := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	c, err := embedetcd.Dial([]string{dead, srv.Endpoint()})
	if err != nil {
		t.Fatalf("first endpoint down, second up: %v", err)
	}
	c.Close()
	_, err = embedetcd.Dial([]string{dead})
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("no endpoint up: %v; want an error naming %s", err, dead)
	}
}
