package pki_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/pki"
)

func parse(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Init writes the CA, a certificate per node with its SANs, one per role;
// keys 0600; every certificate verifies against the CA for its use; the
// role is read from the organization.
func TestInitLayoutAndRoles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	w, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n1", "n2"}, Hosts: []string{"n1=10.0.0.1", "n2=node-two.example", "shared.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Created) != 2*(1+2+3) || len(w.Kept) != 0 {
		t.Fatalf("created %v, kept %v", w.Created, w.Kept)
	}
	for _, name := range []string{"ca", "n1", "n2", "admin", "operator", "viewer"} {
		for ext, mode := range map[string]os.FileMode{".key": 0o600, ".crt": 0o644} {
			st, err := os.Stat(filepath.Join(dir, name+ext))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != mode {
				t.Errorf("%s%s: mode %v, want %v", name, ext, st.Mode().Perm(), mode)
			}
		}
	}
	ca := parse(t, filepath.Join(dir, "ca.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	n1 := parse(t, filepath.Join(dir, "n1.crt"))
	for _, host := range []string{"n1", "localhost", "127.0.0.1", "10.0.0.1", "shared.example"} {
		if _, err := n1.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("n1 as a server for %s: %v", host, err)
		}
	}
	if _, err := n1.Verify(x509.VerifyOptions{DNSName: "node-two.example", Roots: roots}); err == nil {
		t.Error("n1 is valid for n2's host name")
	}
	if _, err := n1.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("n1 as a client: %v", err)
	}
	for name, want := range map[string]pki.Role{"n1": pki.RoleNode, "admin": pki.RoleAdmin, "operator": pki.RoleOperator, "viewer": pki.RoleViewer} {
		c := parse(t, filepath.Join(dir, name+".crt"))
		if got, err := pki.RoleOf(c); err != nil || got != want {
			t.Errorf("role of %s: %q %v, want %q", name, got, err, want)
		}
		if name == "n1" {
			continue
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("client certificate %s verifies as a server", name)
		}
	}
	if _, err := pki.RoleOf(ca); err == nil {
		t.Error("the CA names a role")
	}
	// Every node certificate, and only it, is a node's for etcd.
	if err := n1.VerifyHostname(pki.NodeName); err != nil {
		t.Errorf("n1 is not valid for %s: %v", pki.NodeName, err)
	}
	if err := pki.CheckNode(filepath.Join(dir, "n1.crt"), "n1"); err != nil {
		t.Errorf("CheckNode(n1): %v", err)
	}
	// ... for the hosts it advertises: its own, never another node's.
	good := [][2]string{{"--advertise", "10.0.0.1"}, {"--advertise", "n1"}, {"--etcd-advertise-peer", "shared.example"}, {"--etcd-listen-client", "127.0.0.1"}, {"--advertise", ""}}
	if err := pki.CheckNode(filepath.Join(dir, "n1.crt"), "n1", good...); err != nil {
		t.Errorf("CheckNode(n1, its hosts): %v", err)
	}
	for _, h := range []string{"node-two.example", "10.0.0.2", "n2"} {
		err := pki.CheckNode(filepath.Join(dir, "n1.crt"), "n1", [2]string{"--advertise", "n1"}, [2]string{"--etcd-advertise-peer", h})
		if err == nil || !strings.Contains(err.Error(), "not valid for "+h+", which --etcd-advertise-peer advertises") || !strings.Contains(err.Error(), "--hosts") {
			t.Errorf("CheckNode(n1, %s): %v", h, err)
		}
	}
	// ... and only for the node it names (its common name): n2 on n1's
	// certificate would speak for n1.
	if err := pki.CheckNode(filepath.Join(dir, "n1.crt"), "n2"); err == nil || !strings.Contains(err.Error(), `names node "n1" but --node-id is "n2"`) {
		t.Errorf("CheckNode(n1's certificate, node n2): %v", err)
	}
	for _, r := range []string{"admin", "operator", "viewer"} {
		if err := pki.CheckNode(filepath.Join(dir, r+".crt"), r); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("CheckNode(%s): %v", r, err)
		}
	}
	// A node certificate signed elsewhere without the name is refused too.
	bare := filepath.Join(t.TempDir(), "bare.crt")
	signNodeWithout(t, dir, bare)
	if err := pki.CheckNode(bare, "n9"); err == nil || !strings.Contains(err.Error(), pki.NodeName) {
		t.Errorf("CheckNode(a node certificate without %s): %v", pki.NodeName, err)
	}

	// Again with a new node: the CA and the old files are kept.
	w, err = pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n1", "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Created, " ") != filepath.Join(dir, "n3.crt")+" "+filepath.Join(dir, "n3.key") {
		t.Fatalf("second init created %v", w.Created)
	}
	if _, err := parse(t, filepath.Join(dir, "n3.crt")).Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		t.Fatalf("n3 is not signed by the first CA: %v", err)
	}
	if !parse(t, filepath.Join(dir, "ca.crt")).Equal(ca) {
		t.Fatal("the CA was replaced")
	}
}

// signNodeWithout writes to path a node certificate of dir's CA that is
// valid for its own name only (as one made by hand might be).
func signNodeWithout(t *testing.T, dir, path string) {
	t.Helper()
	ca := parse(t, filepath.Join(dir, "ca.crt"))
	data, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("ca.key: no PEM")
	}
	caKey, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(4242),
		Subject:      pkix.Name{CommonName: "n9", Organization: []string{string(pki.RoleNode)}},
		DNSNames:     []string{"n9"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A server config and a client config made from the files talk; a client
// without a certificate, or with one of another CA, is refused.
func TestMutualTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, err := pki.Init(pki.InitOptions{Dir: d, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	files := func(d, name string) pki.Files {
		return pki.Files{Cert: filepath.Join(d, name+".crt"), Key: filepath.Join(d, name+".key"), CA: filepath.Join(d, "ca.crt")}
	}
	srvCfg, err := files(dir, "n1").ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	roles := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				roles <- "refused"
				c.Close()
				continue
			}
			r, err := pki.RoleOf(tc.ConnectionState().PeerCertificates[0])
			if err != nil {
				roles <- err.Error()
			} else {
				roles <- string(r)
			}
			_, _ = io.WriteString(c, "ok")
			c.Close()
		}
	}()
	dial := func(cfg *tls.Config) error {
		cfg.ServerName = "localhost"
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadAll(c)
		return err
	}
	viewer, err := files(dir, "viewer").ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(viewer); err != nil {
		t.Fatalf("viewer: %v", err)
	}
	if r := <-roles; r != "viewer" {
		t.Fatalf("the server saw role %q", r)
	}
	// A client of the other CA: its certificate is refused by the server
	// (and it refuses the server's).
	stranger, err := files(other, "admin").ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(stranger); err == nil {
		t.Fatal("a client of another CA got through")
	}
	// No client certificate at all.
	pool := x509.NewCertPool()
	pool.AddCert(parse(t, filepath.Join(dir, "ca.crt")))
	if err := dial(&tls.Config{RootCAs: pool}); err == nil {
		t.Fatal("a client without a certificate got through")
	}
	if r := <-roles; r != "refused" {
		t.Fatalf("the server saw %q from a client without a certificate", r)
	}
}

func TestInitRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		o    pki.InitOptions
		want string
	}{
		{pki.InitOptions{Nodes: []string{"n1"}}, "--dir"},
		{pki.InitOptions{Dir: dir}, "--nodes"},
		{pki.InitOptions{Dir: dir, Nodes: []string{"N 1"}}, `--nodes: "N 1"`},
		{pki.InitOptions{Dir: dir, Nodes: []string{"admin"}}, "reserved"},
		{pki.InitOptions{Dir: dir, Nodes: []string{"n1", "n1"}}, "twice"},
		{pki.InitOptions{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"n9=h"}}, "not in --nodes"},
		{pki.InitOptions{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"a b"}}, "--hosts"},
	} {
		if _, err := pki.Init(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("refused options wrote %d files", len(entries))
	}
	// Half a CA is refused rather than replaced.
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"n2"}}); err == nil || !strings.Contains(err.Error(), "only one of ca.crt and ca.key") {
		t.Fatalf("half a CA: %v", err)
	}
}
