package pki

import (
	"crypto/tls"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Transport is how a shoal process talks to the others: mutual TLS made
// from Files, or plaintext. A nil *Transport is plaintext, so code that
// dials or serves takes one and never asks which.
type Transport struct {
	server, client *tls.Config
}

// Transport loads f: nil (plaintext) when f is unset.
func (f Files) Transport() (*Transport, error) {
	if !f.Set() {
		return nil, nil
	}
	if err := f.Validate("--tls"); err != nil {
		return nil, err
	}
	s, err := f.ServerConfig()
	if err != nil {
		return nil, err
	}
	c, err := f.ClientConfig()
	if err != nil {
		return nil, err
	}
	return &Transport{server: s, client: c}, nil
}

// Secure reports whether t is mutual TLS.
func (t *Transport) Secure() bool { return t != nil }

// ServerCreds are a gRPC server's transport credentials.
func (t *Transport) ServerCreds() credentials.TransportCredentials {
	if t == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(t.server.Clone())
}

// DialCreds are a gRPC client's transport credentials; the server's name
// is checked against the host of the address dialed.
func (t *Transport) DialCreds() credentials.TransportCredentials {
	if t == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(t.client.Clone())
}

// ClientTLS is the TLS of a client of another protocol (etcd's); nil for
// plaintext.
func (t *Transport) ClientTLS() *tls.Config {
	if t == nil {
		return nil
	}
	return t.client.Clone()
}
