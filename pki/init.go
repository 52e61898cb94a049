package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// InitOptions say what Init writes.
type InitOptions struct {
	// Dir receives the files (made 0700 if absent).
	Dir string
	// Nodes are the node ids to sign certificates for.
	Nodes []string
	// Hosts are extra subject alternative names: "NODE=HOST" for one
	// node, a plain "HOST" for every node. A host that parses as an IP
	// is an IP SAN, anything else a DNS name.
	Hosts []string
	// Validity of the certificates signed now (default 365 days); the CA,
	// when made, is valid ten times as long.
	Validity time.Duration
	// Force replaces existing node and client certificates (never the CA:
	// a new CA would orphan every certificate already handed out).
	Force bool
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Written is what Init did, file by file.
type Written struct {
	Created []string // files written
	Kept    []string // files that existed and were left alone
}

var nodeIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// Validate checks the options; errors name the flag.
func (o *InitOptions) Validate() error {
	if o.Dir == "" {
		return errors.New("--dir: required (the directory to write the certificates to)")
	}
	if len(o.Nodes) == 0 {
		return errors.New("--nodes: at least one node id is required (e.g. --nodes n1,n2,n3)")
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if !nodeIDPattern.MatchString(n) {
			return fmt.Errorf("--nodes: %q is not a node id (lower-case letters, digits, '.' and '-', at most 63)", n)
		}
		if slices.Contains(Roles, Role(n)) || n == "ca" {
			return fmt.Errorf("--nodes: %q is reserved (its files would clash with the %s certificate)", n, n)
		}
		if seen[n] {
			return fmt.Errorf("--nodes: %q is given twice", n)
		}
		seen[n] = true
	}
	for _, h := range o.Hosts {
		node, host, bound := strings.Cut(h, "=")
		if !bound {
			host = node
		} else if !seen[node] {
			return fmt.Errorf("--hosts: %q names node %q, which is not in --nodes", h, node)
		}
		if host == "" || strings.ContainsAny(host, " /,") {
			return fmt.Errorf("--hosts: %q is not a host name or IP", h)
		}
	}
	if o.Validity < 0 {
		return fmt.Errorf("--days: must be positive")
	}
	return nil
}

// Init writes the CA (if absent), a certificate per node and per role into
// o.Dir. It refuses a directory whose CA key is there without its
// certificate (or the reverse) rather than guess.
func Init(o InitOptions) (Written, error) {
	var w Written
	if err := o.Validate(); err != nil {
		return w, err
	}
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return w, fmt.Errorf("--dir: %w", err)
	}
	ca, err := loadOrMakeCA(o, &w)
	if err != nil {
		return w, err
	}
	for _, n := range o.Nodes {
		dns, ips := []string{n, NodeName, "localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		for _, h := range o.Hosts {
			node, host, bound := strings.Cut(h, "=")
			if !bound {
				host = node
			} else if node != n {
				continue
			}
			if ip := net.ParseIP(host); ip != nil {
				ips = append(ips, ip)
			} else {
				dns = append(dns, host)
			}
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: n, Organization: []string{string(RoleNode)}},
			DNSNames:    dedupe(dns),
			IPAddresses: ips,
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		if err := issue(o, &w, ca, n, tmpl); err != nil {
			return w, err
		}
	}
	for _, r := range Roles {
		if r == RoleNode {
			continue
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: string(r), Organization: []string{string(r)}},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := issue(o, &w, ca, string(r), tmpl); err != nil {
			return w, err
		}
	}
	return w, nil
}

func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func loadOrMakeCA(o InitOptions, w *Written) (authority, error) {
	crtPath, keyPath := filepath.Join(o.Dir, "ca.crt"), filepath.Join(o.Dir, "ca.key")
	crtErr, keyErr := exists(crtPath), exists(keyPath)
	switch {
	case crtErr == nil && keyErr == nil:
		cert, err := readCert(crtPath)
		if err != nil {
			return authority{}, err
		}
		key, err := readKey(keyPath)
		if err != nil {
			return authority{}, err
		}
		if !key.PublicKey.Equal(cert.PublicKey) {
			return authority{}, fmt.Errorf("%s does not belong to %s", keyPath, crtPath)
		}
		w.Kept = append(w.Kept, crtPath, keyPath)
		return authority{cert, key}, nil
	case crtErr == nil || keyErr == nil:
		return authority{}, fmt.Errorf("%s holds only one of ca.crt and ca.key: restore the other, or use an empty directory", o.Dir)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, err
	}
	now := o.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "shoal cluster CA", Organization: []string{"shoal"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return authority{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return authority{}, err
	}
	if err := writePair(w, crtPath, der, keyPath, key); err != nil {
		return authority{}, err
	}
	return authority{cert, key}, nil
}

// issue signs tmpl as <name>.crt with a new key <name>.key, unless both
// exist and Force is off.
func issue(o InitOptions, w *Written, ca authority, name string, tmpl *x509.Certificate) error {
	crtPath, keyPath := filepath.Join(o.Dir, name+".crt"), filepath.Join(o.Dir, name+".key")
	if !o.Force && exists(crtPath) == nil && exists(keyPath) == nil {
		w.Kept = append(w.Kept, crtPath, keyPath)
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := o.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(o.Validity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return err
	}
	return writePair(w, crtPath, der, keyPath, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on the platforms Go supports
	}
	return n
}

func writePair(w *Written, crtPath string, der []byte, keyPath string, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first: a certificate without its key is the worse leftover.
	if err := WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	if err := WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	w.Created = append(w.Created, crtPath, keyPath)
	return nil
}

// WriteFile writes data to path with mode (set before any byte is
// written), through a temporary file in the same directory and a rename,
// so a reader never sees half a file (keys, certificates, key rings).
func WriteFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func exists(path string) error {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
