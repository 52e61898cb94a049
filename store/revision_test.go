package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

// countingReader is the node's own member as the store sees it, counting
// the reads it serves; fail makes it answer as a stopped member does.
type countingReader struct {
	store.LocalReader
	n    atomic.Int32
	fail atomic.Bool
}

func (c *countingReader) ModRevision(ctx context.Context, key string) (int64, bool, error) {
	if c.fail.Load() {
		return 0, false, errors.New("etcdserver: server stopped")
	}
	c.n.Add(1)
	return c.LocalReader.ModRevision(ctx, key)
}

// SandboxRevision is the record's current mod revision, through the
// node's own member in process when it has one and through the client
// when that member cannot answer; a missing record is NotFound either way.
func TestSandboxRevision(t *testing.T) {
	c, srv := testenv.Etcd(t)
	local := &countingReader{LocalReader: srv}
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		local *countingReader
	}{{"client", nil}, {"local", local}} {
		t.Run(tc.name, func(t *testing.T) {
			o := store.Options{Prefix: "/rev-" + tc.name + "/"}
			if tc.local != nil {
				o.Local = tc.local
			}
			s := store.New(c, o)
			if _, err := s.SandboxRevision(ctx, "default", "absent"); !errors.Is(err, shoal.ErrNotFound) {
				t.Fatalf("a missing sandbox: %v, want NotFound", err)
			}
			sb, err := s.CreateSandbox(ctx, sandbox("r"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				rev, err := s.SandboxRevision(ctx, "default", "r")
				if err != nil || rev != sb.Meta.ResourceVersion {
					t.Fatalf("after write %d: revision %d, %v; want the record's %d", i, rev, err, sb.Meta.ResourceVersion)
				}
				if sb, err = s.UpdateSandbox(ctx, "default", "r", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
					sb.Meta.Labels = map[string]string{"i": string(rune('a' + i))}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.local == nil {
				return
			}
			if tc.local.n.Load() == 0 {
				t.Fatal("the store never read through the local member")
			}
			tc.local.fail.Store(true)
			if rev, err := s.SandboxRevision(ctx, "default", "r"); err != nil || rev != sb.Meta.ResourceVersion {
				t.Fatalf("the local member stopped: revision %d, %v; want %d through the client", rev, err, sb.Meta.ResourceVersion)
			}
		})
	}
}
