package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// A peer whose certificates do not fit this side's is a mistake of
// configuration that no retry mends: a node joining another cluster's CA,
// a worker given the wrong --tls-ca. gRPC and etcd's client report it as
// an unavailable peer and retry it for as long as their caller lets them
// (minutes, for a join), so Probe looks at the handshake itself and says
// which side refused which certificate.

// Mismatch is why a TLS handshake with a peer failed on a certificate.
type Mismatch int

const (
	// PeerUntrusted: the peer's certificate is not signed by this side's
	// CA (--tls-ca): the two sides have different CAs.
	PeerUntrusted Mismatch = iota + 1
	// RefusedByPeer: the peer refused this side's certificate (a CA it
	// does not trust, or one it finds expired or unfit).
	RefusedByPeer
	// PeerNameMismatch: the peer's certificate is signed by the CA but
	// not valid for the host dialed.
	PeerNameMismatch
	// PeerCertInvalid: the peer's certificate is signed by the CA but
	// not valid now (expired, not yet valid) or not for this use.
	PeerCertInvalid
	// PeerPlaintext: the peer does not speak TLS.
	PeerPlaintext
)

// CertError is a TLS handshake with Addr that failed on a certificate: no
// retry helps until one side's certificates change.
type CertError struct {
	Addr     string
	Mismatch Mismatch
	Err      error // the handshake's own error
}

func (e *CertError) Error() string {
	var what string
	switch e.Mismatch {
	case PeerUntrusted:
		what = "its certificate is not signed by the CA of --tls-ca: the cluster's CA is another"
	case RefusedByPeer:
		what = "it refused the certificate of --tls-cert: the cluster's CA is another, or the certificate has expired"
	case PeerNameMismatch:
		what = "its certificate is not valid for the host dialed (`shoal certs init --hosts` adds names)"
	case PeerCertInvalid:
		what = "its certificate is not valid now or not for this use"
	case PeerPlaintext:
		what = "it does not speak TLS: the cluster runs without --tls-*"
	}
	return fmt.Sprintf("%s: %s (%v)", e.Addr, what, e.Err)
}

func (e *CertError) Unwrap() error { return e.Err }

// IsCAMismatch reports whether the two sides' CAs differ (or this side's
// certificate is refused), as opposed to a certificate that is signed by
// the right CA but unfit.
func (e *CertError) IsCAMismatch() bool {
	return e.Mismatch == PeerUntrusted || e.Mismatch == RefusedByPeer
}

// probeTimeout bounds each step of a Probe: the dial, the handshake and
// the wait for the peer's first bytes.
const probeTimeout = 3 * time.Second

// http2Greeting is a client's HTTP/2 connection preface and an empty
// SETTINGS frame: both peers Probe meets (a node's gRPC API, an etcd
// client URL) answer it with a SETTINGS frame of their own.
const http2Greeting = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// Probe opens one TLS connection to addr (host:port) as t's client and
// returns a *CertError if the handshake fails on a certificate, on either
// side. With TLS 1.3 a server's refusal of the client's certificate
// arrives after the client's handshake is done, so Probe sends an HTTP/2
// greeting and reads the answer. Any other failure (nothing listening, a
// timeout) is returned as it is: such a peer may come up later. nil: the
// peer took this side's certificate and this side took its. A plaintext
// Transport (nil) has nothing to probe.
func (t *Transport) Probe(ctx context.Context, addr string) error {
	if t == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	cfg := t.client.Clone()
	cfg.ServerName = host
	cfg.NextProtos = []string{"h2"}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return classify(addr, err)
	}
	deadline := time.Now().Add(probeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(http2Greeting)); err != nil {
		return classify(addr, err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // a peer that says nothing has not refused us
		}
		return classify(addr, err)
	}
	return nil
}

// classify turns a handshake's error into a *CertError when a certificate
// caused it, and returns it as it is otherwise.
func classify(addr string, err error) error {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &unknown):
		return &CertError{Addr: addr, Mismatch: PeerUntrusted, Err: err}
	case errors.As(err, &hostname):
		return &CertError{Addr: addr, Mismatch: PeerNameMismatch, Err: err}
	case errors.As(err, &invalid):
		return &CertError{Addr: addr, Mismatch: PeerCertInvalid, Err: err}
	case errors.As(err, &record):
		return &CertError{Addr: addr, Mismatch: PeerPlaintext, Err: err}
	case errors.As(err, &op) && op.Op == "remote error" && refusalAlert(op.Err):
		return &CertError{Addr: addr, Mismatch: RefusedByPeer, Err: err}
	}
	return err
}

// refusalAlert reports whether a TLS alert a peer sent refuses this side's
// certificate. crypto/tls keeps its alert type to itself; its texts are
// those of RFC 8446's alert names.
func refusalAlert(alert error) bool {
	switch strings.TrimPrefix(alert.Error(), "tls: ") {
	case "bad certificate", "unsupported certificate", "revoked certificate", "expired certificate",
		"unknown certificate", "unknown certificate authority", "certificate required", "access denied":
		return true
	}
	return false
}
