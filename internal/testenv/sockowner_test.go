package testenv

import (
	"net"
	"os"
	"testing"
)

// The process that dialed a loopback connection is found from the end
// the listener accepted; a process that does not hold it is not.
func TestSocketOwner(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := socketOwner(s, []int{1, os.Getpid()}); got != os.Getpid() {
		t.Fatalf("socketOwner of the accepted end: %d, want this process %d", got, os.Getpid())
	}
	if got := socketOwner(s, []int{1}); got != 0 {
		t.Fatalf("socketOwner among processes that do not hold it: %d, want 0", got)
	}
}
