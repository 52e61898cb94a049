package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// Role is what a client certificate may do; its certificate's
// organization names it.
type Role string

const (
	// RoleAdmin may call everything.
	RoleAdmin Role = "admin"
	// RoleOperator runs sandboxes (create, delete, exec, logs) and may
	// read providers, not change them.
	RoleOperator Role = "operator"
	// RoleViewer may get, list and watch.
	RoleViewer Role = "viewer"
	// RoleNode is a node of the cluster: its calls to other nodes
	// (forwarding) are a node's.
	RoleNode Role = "node"
)

// NodeName is a DNS name every node certificate carries besides its
// own: the embedded etcd members admit only certificates valid for it
// (clients and peers alike), so a client certificate of the same CA (an
// admin's, a viewer's) cannot reach etcd past the roles. `shoal certs
// init` adds it; a certificate made elsewhere must have it too.
const NodeName = "node.shoal.internal"

// Roles are all roles, most powerful first.
var Roles = []Role{RoleAdmin, RoleOperator, RoleViewer, RoleNode}

// RoleOf is the role a verified peer certificate carries: the one
// organization of its subject that names a role. None, or two, is an error.
func RoleOf(cert *x509.Certificate) (Role, error) {
	var found []Role
	for _, o := range cert.Subject.Organization {
		if slices.Contains(Roles, Role(o)) && !slices.Contains(found, Role(o)) {
			found = append(found, Role(o))
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("certificate %q names no role (its organization must be one of admin, operator, viewer, node)", cert.Subject.CommonName)
	}
	return "", fmt.Errorf("certificate %q names several roles (%v)", cert.Subject.CommonName, found)
}

// CheckNode says why the certificate at path cannot be node id's: it must
// name the node role and the node (its common name, which `shoal certs
// init` sets to the node id), and be valid for NodeName and for every host
// the node advertises (hosts: the flag that gives it, then the host name
// or IP), or the nodes and clients that dial it there refuse it. A node
// that ran on another node's certificate would speak for that node
// everywhere a certificate names its holder (the audit log, etcd's peers).
func CheckNode(path, id string, hosts ...[2]string) error {
	c, err := readCert(path)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	role, err := RoleOf(c)
	if err != nil {
		return fmt.Errorf("--tls-cert %s: %w", path, err)
	}
	if role != RoleNode {
		return fmt.Errorf("--tls-cert %s: a node needs a node certificate (organization %q), this one is %q's", path, RoleNode, role)
	}
	if c.Subject.CommonName != id {
		return fmt.Errorf("--tls-cert %s names node %q but --node-id is %q: give this node its own certificate (`shoal certs init --dir DIR --nodes %s` writes DIR/%s.crt), or the --node-id the certificate names",
			path, c.Subject.CommonName, id, id, id)
	}
	if err := c.VerifyHostname(NodeName); err != nil {
		return fmt.Errorf("--tls-cert %s: a node certificate must also be valid for %s (etcd admits only such certificates); `shoal certs init --force` issues new ones", path, NodeName)
	}
	for _, h := range hosts {
		if h[1] == "" {
			continue
		}
		if err := c.VerifyHostname(h[1]); err != nil {
			return fmt.Errorf("--tls-cert %s is not valid for %s, which %s advertises (it is valid for %s): nodes and clients dialing it there would refuse it; issue certificates with `shoal certs init --hosts NODE=HOST,...`",
				path, h[1], h[0], strings.Join(append(slices.Clone(c.DNSNames), ipStrings(c.IPAddresses)...), ", "))
		}
	}
	return nil
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// Files are the three PEM files of one side of a mutual TLS connection.
type Files struct {
	Cert, Key, CA string
}

// Set reports whether any of the three is given.
func (f Files) Set() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate requires all three once any is given; flag is the flag prefix
// the errors name (e.g. "--tls").
func (f Files) Validate(flag string) error {
	if !f.Set() {
		return nil
	}
	var missing []string
	for _, m := range []struct{ name, v string }{{"-cert", f.Cert}, {"-key", f.Key}, {"-ca", f.CA}} {
		if m.v == "" {
			missing = append(missing, flag+m.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%v: required with the other TLS flags (mutual TLS needs a certificate, its key and the CA)", missing)
	}
	return nil
}

// ServerConfig is the TLS of a listener that requires a client certificate
// signed by the CA.
func (f Files) ServerConfig() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// ClientConfig is the TLS of a dialer that presents the certificate and
// verifies the server against the CA.
func (f Files) ClientConfig() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

func (f Files) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.Cert, f.Key, err)
	}
	pemCA, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CA)
	}
	return cert, pool, nil
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: not a PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%s: not a PEM key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New(path + ": not an ECDSA key")
	}
	return ek, nil
}
