package shim

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if b = <-acc; b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// lockedBuffer is a bytes.Buffer written by one goroutine, read by another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Copy moves every byte in order through bursts larger than its buffer
// and idle spells between them, holds no buffer while the source is
// idle, ends with nil at the source's EOF, and gives up at the source's
// read deadline.
func TestCopy(t *testing.T) {
	w, src := tcpPair(t)
	got := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Copy(got, src)
		done <- err
	}()
	var sent bytes.Buffer
	chunk := make([]byte, 3*CopyBuffer+17)
	for i := range 4 {
		rand.Read(chunk)
		part := chunk[:len(chunk)-i]
		sent.Write(part)
		if _, err := w.Write(part); err != nil {
			t.Fatal(err)
		}
		// The burst arrives, and the idle copy gives its buffer back.
		deadline := time.Now().Add(10 * time.Second)
		for got.Len() != sent.Len() || buffersHeld.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: %d of %d bytes copied, %d buffers held; want all, and none held while idle", i, got.Len(), sent.Len(), buffersHeld.Load())
			}
			<-time.After(time.Millisecond)
		}
	}
	if err := w.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Copy at the source's EOF: %v, want nil", err)
	}
	if !bytes.Equal(got.b.Bytes(), sent.Bytes()) {
		t.Fatalf("copied %d bytes that differ from the %d sent", got.Len(), sent.Len())
	}

	_, idle := tcpPair(t)
	idle.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := Copy(io.Discard, idle); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Copy of an idle source past its read deadline: %v", err)
	}
	if n := buffersHeld.Load(); n != 0 {
		t.Fatalf("%d buffers held after every copy ended", n)
	}
}
