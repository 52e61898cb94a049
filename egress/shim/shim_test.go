package shim

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoSocket serves a unix socket that answers each connection with
// "from node: " and every byte it reads, then closes after the client's
// EOF: the node's proxy stand-in.
func echoSocket(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ln, func(_ context.Context, c net.Conn, _ *Conns) {
			io.WriteString(c, "from node: ")
			io.Copy(c, c)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

func TestForward(t *testing.T) {
	sock := echoSocket(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, sock) }()

	payload := strings.Repeat("sandbox bytes ", 100_000)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			var w sync.WaitGroup
			w.Go(func() {
				io.WriteString(c, payload)
				c.(*net.TCPConn).CloseWrite() // the half-close must reach the node
			})
			got, err := io.ReadAll(c)
			w.Wait()
			if err != nil || string(got) != "from node: "+payload {
				t.Errorf("read %d bytes, %v; want %d", len(got), err, len("from node: "+payload))
			}
		})
	}
	wg.Wait()

	// A connection open when the context ends is cut, and Forward returns.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, len("from node: "))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Forward did not return")
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the connection survived Forward")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection was not cut")
	}
}

// TestForwardNoSocket: with no node listening, a connection is closed at
// once, and the shim goes on.
func TestForwardNoSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, filepath.Join(t.TempDir(), "absent.sock")) }()
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read: %v, want EOF or reset", err)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the connection was left open")
		}
		c.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
