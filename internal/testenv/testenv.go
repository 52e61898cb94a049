package testenv

import (
	"fmt"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal/embedetcd"
	"shoal/internal/freeport"
)

// FreePort returns a loopback port nobody listens on right now, outside
// the kernel's ephemeral range (package freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// EtcdConfig returns an embedded etcd config on free loopback ports.
func EtcdConfig(t testing.TB, dataDir string) embedetcd.Config {
	cfg := embedetcd.DefaultConfig(dataDir)
	cfg.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	cfg.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	cfg.UnsafeNoFsync = true
	return cfg
}

// Etcd starts an embedded etcd in a temp dir and returns a client for it.
// Both are closed when the test ends.
func Etcd(t testing.TB) (*clientv3.Client, *embedetcd.Server) {
	t.Helper()
	srv, err := embedetcd.Start(EtcdConfig(t, filepath.Join(t.TempDir(), "etcd")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, srv
}
