// Package freeport hands out loopback ports for processes that a test, a
// chaos run or a benchmark starts and that must be told their port before
// they bind it.
//
// A port the kernel picked for a ":0" listener is an ephemeral one (Linux:
// 32768-60999), and the kernel hands the same range to outgoing
// connections: between the probe and the child's bind, any client socket
// of any process may take it ("address already in use"). The ports here
// come from below that range instead, at random (so that parallel test
// processes rarely meet), never twice in one process, and only if a listen
// on them succeeds now.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// The range ports are drawn from: below Linux's default ephemeral range.
const (
	low  = 20000
	high = 32000
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Get returns a loopback TCP port that nobody listens on now, that the
// kernel does not hand to outgoing connections, and that this process has
// not returned before.
func Get() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		p := low + rand.IntN(high-low)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free loopback port in %d-%d after 1000 tries", low, high)
}
