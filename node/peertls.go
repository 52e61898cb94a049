package node

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"shoal/pki"
)

// A node that joins a cluster (--join) or works for one (--etcd-endpoints)
// with certificates of another CA would retry the handshake as if the
// cluster were down: gRPC and etcd's client report a refused certificate
// as an unavailable peer. checkPeers looks at the handshake itself, so the
// start fails at once naming the address and the flag; a peer that is
// only unreachable is left to the caller's retries.

// caHint says what to do about a CA mismatch.
const caHint = "give --tls-ca the cluster's CA (ca.crt of the directory `shoal certs init` wrote for it) and --tls-cert/--tls-key this node's certificate signed by it"

// checkPeers probes each address (host:port, or an etcd endpoint URL) of
// flag over this node's TLS, side by side. It fails when some refused a
// certificate and none took this node's: a cluster with one member
// misconfigured still serves, so that one is only logged. Without TLS it
// does nothing.
func (n *Node) checkPeers(ctx context.Context, flag string, addrs []string) error {
	if !n.transport.Secure() {
		return nil
	}
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		hostPort, ok := endpointHostPort(a)
		if !ok {
			errs[i] = errors.New("not probed")
			continue
		}
		wg.Go(func() { errs[i] = n.transport.Probe(ctx, hostPort) })
	}
	wg.Wait()
	var first *pki.CertError
	took := false
	for _, err := range errs {
		var ce *pki.CertError
		switch {
		case err == nil:
			took = true
		case errors.As(err, &ce) && first == nil:
			first = ce
		}
	}
	if first == nil {
		return nil
	}
	if !took {
		return peerErr(flag, first)
	}
	for i, err := range errs {
		if ce := (*pki.CertError)(nil); errors.As(err, &ce) {
			n.log.Warn("a peer's certificates do not fit this node's; the others' do", "flag", flag, "address", addrs[i], "err", ce)
		}
	}
	return nil
}

// peerErr is the start's one line about a peer whose certificates do not
// fit this node's; it wraps the *pki.CertError.
func peerErr(flag string, ce *pki.CertError) error {
	hint := caHint
	switch ce.Mismatch {
	case pki.PeerPlaintext:
		hint = "start this node without --tls-cert/--tls-key/--tls-ca, or the cluster with them"
	case pki.PeerNameMismatch:
		hint = "dial it at a name its certificate carries, or reissue its certificate with `shoal certs init --hosts NODE=HOST --force`"
	case pki.PeerCertInvalid:
		hint = "check its certificate's dates and the clocks; `shoal certs init --force` issues new certificates"
	}
	return fmt.Errorf("%s %w; %s", flag, ce, hint)
}

// endpointHostPort is the host:port of an etcd endpoint (a URL, or
// host:port as etcd's client takes it); false for a unix socket.
func endpointHostPort(ep string) (string, bool) {
	if !strings.Contains(ep, "://") {
		return ep, true
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || strings.HasPrefix(u.Scheme, "unix") {
		return "", false
	}
	return u.Host, true
}
