package pki_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"shoal/pki"
)

// serve answers every connection on ln the way a node's API or an etcd
// client URL answers a client's HTTP/2 greeting: with bytes of its own,
// once the client's bytes have come. It stops when the test ends.
func serve(t *testing.T, ln net.Listener, handshake bool) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if tc, ok := c.(*tls.Conn); ok && handshake && tc.Handshake() != nil {
					return
				}
				var b [4096]byte
				if _, err := c.Read(b[:]); err == nil {
					_, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
				}
			})
		}
	})
}

// Probe says which side refused which certificate: a server of another CA
// (this side's CA does not sign it), a server that refuses this side's
// certificate (TLS 1.3: after the client's handshake is done), a server
// that is not valid for the host dialed, a plaintext server; a matching
// server passes, and a port where nothing listens is no CertError (it may
// come up later).
func TestProbeNamesTheCertificateThatFailed(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, err := pki.Init(pki.InitOptions{Dir: d, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	files := func(d, name string) pki.Files {
		return pki.Files{Cert: filepath.Join(d, name+".crt"), Key: filepath.Join(d, name+".key"), CA: filepath.Join(d, "ca.crt")}
	}
	transport := func(f pki.Files) *pki.Transport {
		tr, err := f.Transport()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	srvCfg, err := files(dir, "n1").ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, true)
	// The same server at an address its certificate does not name.
	other2, err := tls.Listen("tcp", "127.0.0.2:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, other2, true)
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, plain, false)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := closed.Addr().String()
	closed.Close()

	ctx := context.Background()
	// Both sides of one CA.
	if err := transport(files(dir, "n1")).Probe(ctx, ln.Addr().String()); err != nil {
		t.Fatalf("same CA: %v", err)
	}
	for _, tc := range []struct {
		name string
		tr   *pki.Transport
		addr string
		want pki.Mismatch
		text string
	}{
		{"another CA", transport(files(other, "n1")), ln.Addr().String(), pki.PeerUntrusted, "not signed by the CA of --tls-ca"},
		// Trusts the server, but its own certificate is another CA's.
		{"refused", transport(pki.Files{Cert: filepath.Join(other, "n1.crt"), Key: filepath.Join(other, "n1.key"), CA: filepath.Join(dir, "ca.crt")}),
			ln.Addr().String(), pki.RefusedByPeer, "refused the certificate of --tls-cert"},
		{"wrong host", transport(files(dir, "n1")), other2.Addr().String(), pki.PeerNameMismatch, "not valid for the host dialed"},
		{"plaintext", transport(files(dir, "n1")), plain.Addr().String(), pki.PeerPlaintext, "does not speak TLS"},
	} {
		err := tc.tr.Probe(ctx, tc.addr)
		var ce *pki.CertError
		if !errors.As(err, &ce) || ce.Mismatch != tc.want || !strings.Contains(err.Error(), tc.addr) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want a CertError (%d) naming %s and saying %q", tc.name, err, tc.want, tc.addr, tc.text)
		}
		if ce != nil && ce.IsCAMismatch() != (tc.want == pki.PeerUntrusted || tc.want == pki.RefusedByPeer) {
			t.Errorf("%s: IsCAMismatch %v", tc.name, ce.IsCAMismatch())
		}
	}
	var ce *pki.CertError
	if err := transport(files(dir, "n1")).Probe(ctx, nobody); err == nil || errors.As(err, &ce) {
		t.Errorf("nothing listening: %v, want a plain dial error", err)
	}
	var none *pki.Transport
	if err := none.Probe(ctx, ln.Addr().String()); err != nil {
		t.Errorf("plaintext transport: %v", err)
	}
}
