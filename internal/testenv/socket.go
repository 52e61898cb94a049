package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// DialUnix connects to the unix socket at path, also where path is longer
// than a socket address holds (a test's temp dir can be): through its
// directory's descriptor, /proc/self/fd/N/NAME, as the agent listens on
// such a path.
func DialUnix(path string, timeout time.Duration) (net.Conn, error) {
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return net.DialTimeout("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)), timeout)
}

// SocketGet sends one proxied GET of url to a sandbox's egress socket, as
// its sidecar relays a request, and returns the status code and body.
func SocketGet(t testing.TB, socket, url string) (int, string) {
	t.Helper()
	c, err := DialUnix(socket, 5*time.Second)
	if err != nil {
		t.Fatalf("dial the sandbox's egress socket: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: upstream\r\n\r\n", url)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the proxy's answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
