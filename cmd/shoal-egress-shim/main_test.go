package main

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds the shim as make build does, forwards a connection
// through it to a unix socket, and stops it with SIGTERM: exit 0.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "shoal-egress-shim")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	sock := filepath.Join(dir, "proxy.sock")
	node, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	served := make(chan string, 1)
	go func() {
		c, err := node.Accept()
		if err != nil {
			served <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the shim passes on the client's half-close
		io.WriteString(c, "node got "+string(b))
		served <- string(b)
	}()

	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--socket", sock)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// "shoal-egress-shim: listening on 127.0.0.1:PORT, forwarding to PATH"
	addr := strings.TrimSuffix(strings.Fields(line)[3], ",")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT x:443 HTTP/1.1\r\n\r\n")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "node got CONNECT x:443 HTTP/1.1\r\n\r\n" {
		t.Fatalf("through the shim: %q, %v", got, err)
	}
	if s := <-served; s != "CONNECT x:443 HTTP/1.1\r\n\r\n" {
		t.Fatalf("the node read %q", s)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { io.Copy(io.Discard, stderr); exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shim did not exit within 10 s of SIGTERM")
	}
}

func TestUsage(t *testing.T) {
	var out strings.Builder
	if code := run(t.Context(), nil, &out); code != 2 || !strings.Contains(out.String(), "--socket PATH") {
		t.Fatalf("no --socket: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(t.Context(), []string{"--listen", "256.0.0.1:1", "--socket", "x"}, &out); code != 1 {
		t.Fatalf("bad address: %d %q", code, out.String())
	}
}
