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
// its sidecar relays a request, and returns the status code and body; it
// fails the test on an error (call it on the test's goroutine; elsewhere
// TrySocketGet).
func SocketGet(t testing.TB, socket, url string) (int, string) {
	t.Helper()
	code, body, err := TrySocketGet(socket, url)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// TrySocketGet is SocketGet returning its error.
func TrySocketGet(socket, url string) (int, string, error) {
	c, err := DialUnix(socket, 5*time.Second)
	if err != nil {
		return 0, "", fmt.Errorf("dial the sandbox's egress socket: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: upstream\r\n\r\n", url)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", fmt.Errorf("read the proxy's answer: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("read the proxy's answer: %w", err)
	}
	return resp.StatusCode, string(b), nil
}
