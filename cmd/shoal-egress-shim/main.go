// Command shoal-egress-shim runs beside a sandbox, in its network
// namespace (a sidecar container with network mode container:SANDBOX):
// it listens on the proxy address the sandbox's programs are given
// (HTTP_PROXY=http://127.0.0.1:3128) and relays each connection, byte for
// byte, to the unix socket on which the node's egress proxy listens for
// this sandbox alone (package egress explains the design). It stops
// cleanly on SIGTERM or SIGINT: the listener and the open connections are
// closed, and it exits 0.
//
//	shoal-egress-shim --listen 127.0.0.1:3128 --socket /run/shoal-egress/s [--pass]
//
// With --pass it hands each connection's descriptor to the node's proxy
// (shim.Pass) rather than relaying its bytes (shim.Forward).
//
// It is a static binary (CGO_ENABLED=0) that links only the net package,
// so that its image can be FROM scratch.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"shoal/egress/shim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: 0 when stopped by ctx, 1 on failure, 2 for bad
// flags.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("shoal-egress-shim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:3128", "the TCP address to accept the sandbox's proxy connections on")
	socket := fs.String("socket", "", "the unix socket of the node's egress proxy for this sandbox (required)")
	pass := fs.Bool("pass", false, "hand each connection's descriptor to the node's proxy (SCM_RIGHTS) instead of relaying its bytes: one relay fewer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "shoal-egress-shim: usage: shoal-egress-shim [--listen ADDR] --socket PATH [--pass]")
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "shoal-egress-shim: %v\n", err)
		return 1
	}
	serve, how := shim.Forward, "forwarding to"
	if *pass {
		serve, how = shim.Pass, "passing connections to"
	}
	fmt.Fprintf(stderr, "shoal-egress-shim: listening on %s, %s %s\n", ln.Addr(), how, *socket)
	if err := serve(ctx, ln, *socket); err != nil {
		fmt.Fprintf(stderr, "shoal-egress-shim: %v\n", err)
		return 1
	}
	return 0
}
