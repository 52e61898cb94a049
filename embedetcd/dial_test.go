package embedetcd_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/embedetcd"
	"shoal/internal/testenv"
	"shoal/pki"
)

// A client of several endpoints connects while any one answers, and
// fails naming every endpoint when none does.
func TestDialAnyEndpoint(t *testing.T) {
	_, srv := testenv.Etcd(t)
	dead := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	c, err := embedetcd.Dial([]string{dead, srv.Endpoint()})
	if err != nil {
		t.Fatalf("first endpoint down, second up: %v", err)
	}
	c.Close()
	_, err = embedetcd.Dial([]string{dead})
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("no endpoint up: %v; want an error naming %s", err, dead)
	}
}

// A TLS member that listens on every address is dialed, by itself and in
// its voters' URLs, at its advertised client URL: its listen address names
// no host a certificate can be valid for. (A node's client whose own
// endpoint failed so knew only the members that had published their URLs
// when it started; with the one it knew killed, it had no etcd at all.)
func TestTLSMemberListeningEverywhereDialsItself(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.Init(pki.InitOptions{Dir: dir, Nodes: []string{"m1"}}); err != nil {
		t.Fatal(err)
	}
	files := pki.Files{Cert: filepath.Join(dir, "m1.crt"), Key: filepath.Join(dir, "m1.key"), CA: filepath.Join(dir, "ca.crt")}
	cp, pp := testenv.FreePort(t), testenv.FreePort(t)
	cfg := embedetcd.DefaultConfig(filepath.Join(dir, "data"))
	cfg.Name = "m1"
	cfg.ListenClient = fmt.Sprintf("https://0.0.0.0:%d", cp)
	cfg.AdvertiseClient = fmt.Sprintf("https://127.0.0.1:%d", cp)
	cfg.ListenPeer = fmt.Sprintf("https://127.0.0.1:%d", pp)
	cfg.UnsafeNoFsync = true
	cfg.TLS = files
	srv, err := embedetcd.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := srv.Client()
	if err != nil {
		t.Fatalf("the member's own client: %v", err)
	}
	c.Close()
	tc, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	urls := srv.VoterClientURLs()
	if len(urls) != 1 || urls[0] != cfg.AdvertiseClient {
		t.Fatalf("voter client URLs %v; want the advertised %s", urls, cfg.AdvertiseClient)
	}
	c, err = embedetcd.DialMembers(urls, embedetcd.WithTLS(tc))
	if err != nil {
		t.Fatalf("dial the voter client URLs over TLS: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through the voters' URLs: %v", err)
	}
}
