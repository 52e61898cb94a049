package shim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// PassMarker is the one byte that carries a passed connection's
// descriptor (a stream socket's ancillary data needs a byte to ride on).
const PassMarker = 0xfd

// Pass hands every connection ln accepts to the node's proxy itself,
// rather than relaying its bytes: each goes, as a descriptor
// (SCM_RIGHTS), over a connection to the unix socket at socket, and the
// shim closes its own copy at once. The node's proxy then reads and
// writes the sandbox's connection directly, and relays it to the
// upstream: one relay instead of two (docs/benchmarks.md). The
// connection stays in the sandbox's network namespace; the descriptor
// only lets the node use it.
//
// One socket connection carries every descriptor, one after the other,
// for as long as it works (a connection of its own for each cost the
// node an accept per sandbox connection); when a send fails (the node
// restarted, or closed it) the shim dials again and sends once more. A
// node answers the first descriptor of a socket connection with PassAck
// when it reads further ones from it; before the second the shim waits
// for that answer, and a node that closes the connection instead (one of
// before, which took one descriptor per connection) gets one connection
// per descriptor from then on. A connection that cannot be handed over
// (the node is down) is closed at once, as Forward does.
func Pass(ctx context.Context, ln net.Listener, socket string) error {
	var mu sync.Mutex
	var up *net.UnixConn
	acked, oneEach := false, false
	drop := func(open *Conns) {
		open.Remove(up)
		up.Close()
		up = nil
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	return Serve(ctx, ln, func(ctx context.Context, c net.Conn, open *Conns) {
		mu.Lock()
		defer mu.Unlock()
		if up != nil && !acked {
			up.SetReadDeadline(time.Now().Add(passAckTimeout))
			var b [1]byte
			if n, _ := up.Read(b[:]); n == 1 && b[0] == PassAck {
				acked = true
				up.SetReadDeadline(time.Time{})
			} else {
				oneEach = true
				drop(open)
			}
		}
		for range 2 {
			if up == nil {
				u, err := d.DialContext(ctx, "unix", socket)
				if err != nil {
					return
				}
				up, acked = u.(*net.UnixConn), false
				if !open.Add(up) { // Serve is closing: it closes nothing added later
					up.Close()
					up = nil
					return
				}
			}
			// A node that stopped reading must not hold the shim's
			// every connection (and its end) behind this one.
			up.SetWriteDeadline(time.Now().Add(passWriteTimeout))
			err := SendConn(up, c)
			if err == nil && oneEach {
				drop(open)
			}
			if err == nil {
				return
			}
			drop(open)
		}
	})
}

// PassAck is the byte a node answers the first descriptor of a socket
// connection with when it reads more from the connection (Pass).
const PassAck = 0xac

const (
	passAckTimeout   = 5 * time.Second
	passWriteTimeout = 5 * time.Second
)

// SendConn sends c's descriptor over u, on one PassMarker byte.
func SendConn(u *net.UnixConn, c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("shim: a %T has no descriptor to pass", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = u.WriteMsgUnix([]byte{PassMarker}, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// ReceiveConn reads the first message of a shim's connection u: a passed
// connection (c), or, from a shim that relays bytes (Forward), the first
// bytes of the client's stream (data), which the caller reads before the
// rest of u.
func ReceiveConn(u *net.UnixConn) (c net.Conn, data []byte, err error) {
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := u.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if oobn == 0 {
		return nil, buf[:n], nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, nil, fmt.Errorf("shim: a passed connection's control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		if got, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	if len(fds) != 1 || n != 1 || buf[0] != PassMarker {
		return nil, nil, errors.New("shim: a passed connection must be one descriptor on one marker byte")
	}
	f := os.NewFile(uintptr(fds[0]), "passed-connection")
	fds = nil                // f owns it now
	c, err = net.FileConn(f) // a duplicate, close-on-exec
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("shim: a passed connection: %w", err)
	}
	return c, nil, nil
}
