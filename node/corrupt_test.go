package node_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// warnCounter counts log records at Warn and above.
type warnCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (w warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
	}
	return nil
}
func (w warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w warnCounter) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w warnCounter) WithGroup(string) slog.Handler            { return w }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A corrupt sandbox key and a corrupt provider key on a running node, with
// sandboxes created, labelled and deleted around them: nothing stalls,
// the log is not flooded, the CPU is not pegged, the API names the
// corrupt records and deletes them; the leader repairs a stale intent and
// collects a stray attachment key.
func TestCorruptRecordsDoNotStallTheNode(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	var warns atomic.Int64
	cfg.Logger = slog.New(warnCounter{n: &warns})
	n := testenv.StartNode(t, cfg)
	c := n.Client
	ctx := ctxT(t, 3*time.Minute)
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	st := n.Store()

	mkProvider(t, ctx, c, "good")
	mkProvider(t, ctx, c, "rotten")
	garbage := "\x0a\xff\xff\xff\xff garbage"
	// "b" sorts before the sandboxes created below and "m" among them:
	// before, every key after a corrupt one stopped being reconciled.
	for _, k := range []string{st.SandboxKey("default", "b"), st.SandboxKey("default", "m"), st.ProviderKey("default", "rotten")} {
		if _, err := raw.Put(ctx, k, garbage); err != nil {
			t.Fatal(err)
		}
	}
	// A stale intent on a live sandbox, and an attachment key of a
	// sandbox that never existed.
	frozen := mkSandbox(t, ctx, c, "frozen", false)
	if _, err := raw.Put(ctx, "/shoal/deleting/default/frozen", "not-"+frozen.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "/shoal/attach/default/good/ghost", "ghost-uid"); err != nil {
		t.Fatal(err)
	}

	wall, cpu := time.Now(), cpuTime()
	for _, name := range []string{"c", "n", "z"} {
		mkSandbox(t, ctx, c, name, true, "good")
	}
	list, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatalf("list beside corrupt records: %v", err)
	}
	if len(list.Items) != 4 || len(list.Warnings) != 2 {
		t.Fatalf("list: %d items, warnings %q; want 4 items and 2 warnings", len(list.Items), list.Warnings)
	}
	for _, w := range list.Warnings {
		if strings.Contains(w, "nvapi-") {
			t.Fatalf("a warning carries a credential: %q", w)
		}
	}
	if _, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "m"}); status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "/shoal/sandboxes/default/m") {
		t.Fatalf("get a corrupt sandbox: %v, want DATA_LOSS naming its key", err)
	}
	if _, err := c.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "rotten"}); status.Code(err) != codes.DataLoss {
		t.Fatalf("get a corrupt provider: %v, want DATA_LOSS", err)
	}
	// The leader repairs: the frozen sandbox takes labels again, and the
	// provider the ghost held becomes deletable once its real users go.
	testenv.Eventually(t, 30*time.Second, "stale intent removed", func() (bool, error) {
		_, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "frozen", SetLabels: map[string]string{"thawed": "yes"}})
		return err == nil, err
	})
	for _, name := range []string{"c", "n", "z", "frozen"} {
		if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true}); err != nil {
			t.Fatalf("delete %s beside corrupt records: %v", name, err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "provider of a ghost attachment deletable", func() (bool, error) {
		_, err := c.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "good"})
		return err == nil, err
	})
	// The corrupt records themselves are deleted through the API.
	for _, name := range []string{"b", "m"} {
		if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true}); err != nil {
			t.Fatalf("delete corrupt sandbox %s: %v", name, err)
		}
	}
	if _, err := c.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "rotten"}); err != nil {
		t.Fatalf("delete the corrupt provider: %v", err)
	}
	elapsed, used := time.Since(wall), cpuTime()-cpu
	list, err = c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
	if err != nil || len(list.Items) != 0 || len(list.Warnings) != 0 {
		t.Fatalf("after cleanup: %v, %d items, warnings %q", err, len(list.GetItems()), list.GetWarnings())
	}
	// Before, the node logged thousands of warnings a second and used more
	// than a core. Now each corrupt record is reported once per place that
	// meets it.
	if w := warns.Load(); w > 60 {
		t.Errorf("%d warnings logged over %s: the log is flooded", w, elapsed.Round(time.Millisecond))
	}
	if used > elapsed {
		t.Errorf("the test process used %s of CPU in %s: pegged", used, elapsed)
	}
	t.Logf("%d warnings, CPU %s over %s", warns.Load(), used.Round(time.Millisecond), elapsed.Round(time.Millisecond))
}
