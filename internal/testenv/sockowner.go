package testenv

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// The cluster harness partitions a host by the process that dialed: the
// etcd members of a voters cluster dial each other's peer URLs, and raft
// messages flow both ways over whichever side dialed, so refusing the
// connections into a member is no partition while its own outgoing ones
// still pass. Each proxy asks who holds the client end of a connection it
// accepted: the kernel's socket table (/proc/net/tcp) gives the socket's
// inode, and the node processes' fd tables say which one holds it.

// socketOwner returns the one of pids whose process holds the client end
// of the loopback TCP connection the proxy accepted as c, or 0.
func socketOwner(c net.Conn, pids []int) int {
	client, ok1 := c.RemoteAddr().(*net.TCPAddr)
	server, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || len(pids) == 0 {
		return 0
	}
	inode, err := socketInode(client, server)
	if err != nil || inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == want {
				return pid
			}
		}
	}
	return 0
}

// socketInode finds the inode of the TCP socket whose local address is
// local and remote address remote, in this network namespace's table.
func socketInode(local, remote *net.TCPAddr) (string, error) {
	file := "/proc/net/tcp"
	if local.IP.To4() == nil {
		file = "/proc/net/tcp6"
	}
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		if sameAddr(fields[1], local) && sameAddr(fields[2], remote) {
			return fields[9], nil
		}
	}
	return "", sc.Err()
}

// sameAddr compares /proc/net/tcp's HEXIP:HEXPORT form with a. The kernel
// prints the address as 32-bit words in host byte order, the port in
// network order.
func sameAddr(s string, a *net.TCPAddr) bool {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil || int(port) != a.Port {
		return false
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || len(raw)%4 != 0 {
		return false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	want := a.IP
	if len(ip) == net.IPv4len {
		want = a.IP.To4()
	}
	return ip.Equal(want)
}
