// Package shim is the sandbox side of shoal's egress: it accepts the
// connections of a sandbox's programs on the proxy address they are told
// (127.0.0.1:3128 in the sandbox's network namespace) and relays each,
// byte for byte, to the unix socket on which the node's proxy listens
// for that sandbox alone. It knows nothing of HTTP or of policies: the
// node decides everything (package egress). It is kept apart from
// package egress so that the shim's binary (cmd/shoal-egress-shim) links
// nothing but the net package.
package shim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Forward relays every connection ln accepts to the unix socket at
// socket, a new socket connection for each, until ctx is done or ln
// fails, as Serve says. A connection whose socket cannot be dialled (the
// node is restarting) is closed at once: the client sees its proxy
// connection fail, and retries.
func Forward(ctx context.Context, ln net.Listener, socket string) error {
	return toSocket(ctx, ln, socket, func(c net.Conn, up *net.UnixConn, open *Conns) {
		if !open.Add(up) {
			return
		}
		defer open.Remove(up)
		Relay(c, up, nil)
	})
}

// toSocket serves ln (Serve), dialling socket anew for every connection
// it accepts and handing both to use; a connection whose socket cannot be
// dialled is closed at once. Forward and Pass are its two uses.
func toSocket(ctx context.Context, ln net.Listener, socket string, use func(c net.Conn, up *net.UnixConn, open *Conns)) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	return Serve(ctx, ln, func(ctx context.Context, c net.Conn, open *Conns) {
		up, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return
		}
		defer up.Close()
		use(c, up.(*net.UnixConn), open)
	})
}

// Serve runs handle on a goroutine of its own for every connection ln
// accepts, until ctx is done or ln fails; the node's proxy serves each
// sandbox's socket with it too. When ctx is done it closes ln and every
// open connection (the accepted ones and those a handler added to open)
// and returns nil once every handler has returned; when ln fails it
// waits for the handlers and returns the error. It closes each accepted
// connection after its handler. Running out of file descriptors is
// waited out, not an error.
func Serve(ctx context.Context, ln net.Listener, handle func(ctx context.Context, c net.Conn, open *Conns)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	open := &Conns{conns: make(map[io.Closer]struct{})}
	var watcher sync.WaitGroup
	watcher.Go(func() {
		<-ctx.Done()
		ln.Close()
		open.closeAll()
	})
	var handlers sync.WaitGroup
	var err error
	backoff := 5 * time.Millisecond
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(aerr, syscall.EMFILE) || errors.Is(aerr, syscall.ENFILE) || errors.Is(aerr, syscall.ECONNABORTED) {
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				backoff = min(2*backoff, time.Second)
				continue
			}
			err = aerr
			ln.Close()
			break
		}
		backoff = 5 * time.Millisecond
		if !open.Add(c) {
			c.Close()
			continue
		}
		handlers.Go(func() {
			defer open.Remove(c)
			defer c.Close()
			handle(ctx, c, open)
		})
	}
	handlers.Wait()
	cancel()
	watcher.Wait()
	return err
}

// Conns are the connections a Serve closes when its context ends.
type Conns struct {
	mu     sync.Mutex
	closed bool
	conns  map[io.Closer]struct{}
}

// Add registers c; false means Serve is closing, and c must be closed.
func (o *Conns) Add(c io.Closer) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.conns[c] = struct{}{}
	return true
}

// Remove forgets c (closed by its handler).
func (o *Conns) Remove(c io.Closer) {
	o.mu.Lock()
	delete(o.conns, c)
	o.mu.Unlock()
}

func (o *Conns) closeAll() {
	o.mu.Lock()
	o.closed = true
	cs := o.conns
	o.conns = nil
	o.mu.Unlock()
	for c := range cs {
		c.Close()
	}
}

// Relay copies between a and b both ways until both directions have
// ended, first writing early (bytes already read from a) to b. A
// direction that ends cleanly (EOF) half-closes its destination, so that
// a peer that shuts down its writing still reads the whole answer; one
// that fails closes both connections. Each direction copies with Copy.
func Relay(a, b net.Conn, early []byte) {
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if len(early) > 0 {
			_, err = b.Write(early)
		}
		if err == nil {
			_, err = Copy(b, a)
		}
		if err != nil {
			a.Close()
			b.Close()
			return
		}
		CloseWrite(b)
	})
	if _, err := Copy(a, b); err != nil {
		a.Close()
		b.Close()
	} else {
		CloseWrite(a)
	}
	wg.Wait()
}

// CopyBuffer is the size of Copy's buffers.
const CopyBuffer = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, CopyBuffer); return &b }}

// buffersHeld counts the buffers Copy holds now (tests).
var buffersHeld atomic.Int64

// Copy copies from src to dst until src's EOF (a nil error) or an error,
// through a buffer of CopyBuffer bytes that it holds only while src has
// data to read: it waits for src to become readable without one, so an
// idle connection (most tunnels, most of the time) holds no buffer.
//
// It does not splice (io.Copy between two TCP connections does): on this
// machine a splice through a pipe moved 1 GiB between loopback TCP
// connections at 0.77-0.98 of a direct transfer's rate, reads and writes
// of 256 KiB at 1.07-1.14 (docs/benchmarks.md, BenchmarkEgress).
func Copy(dst io.Writer, src net.Conn) (int64, error) {
	var raw syscall.RawConn
	if sc, ok := src.(syscall.Conn); ok {
		raw, _ = sc.SyscallConn()
	}
	var written int64
	for {
		if raw != nil {
			if err := waitReadable(raw); err != nil {
				return written, err
			}
		}
		bp := copyBuffers.Get().(*[]byte)
		buffersHeld.Add(1)
		n, err := drain(dst, src, *bp, raw != nil)
		buffersHeld.Add(-1)
		copyBuffers.Put(bp)
		written += n
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}

// drain copies what src has through buf; with once it returns when a
// read does not fill buf (src has nothing more for now), else at EOF or
// an error.
func drain(dst io.Writer, src io.Reader, buf []byte, once bool) (int64, error) {
	var written int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			written += int64(w)
			if werr != nil {
				return written, werr
			}
			if w != n {
				return written, io.ErrShortWrite
			}
		}
		if rerr != nil {
			return written, rerr
		}
		if once && n < len(buf) {
			return written, nil
		}
	}
}

// waitReadable returns once c has data, its EOF or an error to read (or
// its read deadline passed), without reading anything.
func waitReadable(c syscall.RawConn) error {
	var one [1]byte
	err := c.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN && err != syscall.EINTR
	})
	return err
}

// CloseWrite shuts down c's writing side, if it has one to shut.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
