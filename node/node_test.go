package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mkProvider(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string) {
	t.Helper()
	_, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": "nvapi-" + name},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func mkSandbox(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string, wait bool, providers ...string) *shoalv1.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: wait, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name, Labels: map[string]string{"n": "0"}},
		Spec: &shoalv1.SandboxSpec{Providers: providers},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if wait && sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("sandbox %s: phase %s (%s), want READY", name, sb.Status.Phase, sb.Status.Message)
	}
	return sb
}

// a. The seed race: 32 goroutines update the same sandbox (labels through
// the API, status through the store) in a tight loop while it is deleted
// with wait. The delete and the provider delete right after both succeed,
// every round. The 120 rounds run in 4 lanes at once, each lane on a
// sandbox and providers of its own: a round is mostly waiting on the
// engine (the container's create and removal), and the lanes add
// interleavings across sandboxes on one node. Each round is the whole
// race (32 writers against one wait-delete, hundreds of conflicting
// writes); 120 rather than 200 keeps make test within its minutes, and
// the chaos suite's conflicts and provider-race scenarios run the same
// race for minutes in CI.
func TestSeedRace(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 20*time.Minute)
	rounds := 120
	if testing.Short() {
		rounds = 20
	}
	const lanes = 4
	var conflictsSeen atomic.Int64
	var wg sync.WaitGroup
	failed := make(chan error, lanes)
	for lane := range lanes {
		wg.Go(func() {
			for r := lane; r < rounds; r += lanes {
				if err := seedRound(ctx, n, fmt.Sprintf("seed%d", lane), r, &conflictsSeen); err != nil {
					failed <- fmt.Errorf("lane %d, round %d: %w", lane, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if conflictsSeen.Load() < int64(rounds) {
		t.Fatalf("only %d concurrent writes landed over %d rounds: the race was not exercised", conflictsSeen.Load(), rounds)
	}
}

// seedRound is one round of the seed race on sandbox name: a provider and
// the sandbox attached to it, 32 writers, a wait-delete of the sandbox
// and the provider's delete right after.
func seedRound(ctx context.Context, n *testenv.Node, name string, r int, conflictsSeen *atomic.Int64) error {
	st := n.Store()
	pn := fmt.Sprintf("p%d", r)
	if _, err := n.Client.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: pn}, Type: shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": "nvapi-" + pn},
	}}); err != nil {
		return fmt.Errorf("create provider %s: %w", pn, err)
	}
	if _, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name, Labels: map[string]string{"n": "0"}},
		Spec: &shoalv1.SandboxSpec{Providers: []string{pn}},
	}}); err != nil {
		return fmt.Errorf("create sandbox %s: %w", name, err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if w%2 == 0 {
					_, err = n.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: name, SetLabels: map[string]string{fmt.Sprintf("w%d", w): fmt.Sprint(i)}})
				} else {
					_, err = st.UpdateSandbox(ctx, "default", name, store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
						sb.Status.Message = fmt.Sprintf("watcher %d tick %d", w, i)
						return nil
					})
				}
				if err != nil {
					if status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition ||
						strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "is being deleted") {
						return // deletion requested: the sandbox is frozen, the writers' race is over
					}
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				conflictsSeen.Add(1)
			}
		})
	}
	_, derr := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true})
	_, perr := n.Client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: pn})
	close(stop)
	wg.Wait()
	close(errs)
	if derr != nil {
		return fmt.Errorf("DeleteSandbox under 32 writers: %w", derr)
	}
	if perr != nil {
		return fmt.Errorf("DeleteProvider after the sandbox's wait-delete: %w", perr)
	}
	return <-errs // nil once drained and closed
}

// b. Another etcd client rewrites the sandbox's key with identical bytes
// during deletion; the delete still succeeds.
func TestDeleteUnderIdenticalRewrites(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 5*time.Minute)
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for r := range 10 {
		mkProvider(t, ctx, n.Client, fmt.Sprintf("p%d", r))
		mkSandbox(t, ctx, n.Client, "bump", true, fmt.Sprintf("p%d", r))
		key := n.Store().SandboxKey("default", "bump")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var bumps atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := raw.Get(ctx, key)
				if err != nil || len(resp.Kvs) == 0 {
					continue
				}
				kv := resp.Kvs[0]
				// Put only if unchanged, so the rewrite is byte-identical
				// and never resurrects a removed record.
				tx, err := raw.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
					Then(clientv3.OpPut(key, string(kv.Value))).Commit()
				if err == nil && tx.Succeeded {
					bumps.Add(1)
				}
			}
		}()
		_, derr := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "bump", Wait: true})
		close(stop)
		wg.Wait()
		if derr != nil {
			t.Fatalf("round %d: delete under identical rewrites: %v", r, derr)
		}
		if _, err := n.Client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: fmt.Sprintf("p%d", r)}); err != nil {
			t.Fatalf("round %d: provider delete: %v", r, err)
		}
		if bumps.Load() == 0 {
			t.Fatalf("round %d: no rewrite landed; nothing was tested", r)
		}
	}
}

// e. A container removed behind shoal's back puts the sandbox in ERROR, and
// it stays deletable. A labelled container with no record is reaped.
func TestExternalRemovalAndOrphans(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.MetricsListen = metricsAddr
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 5*time.Minute)
	sb := mkSandbox(t, ctx, n.Client, "victim", true)
	if err := dc.ContainerRemove(ctx, sb.Status.ContainerId, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "sandbox in ERROR after its container was removed", func() (bool, error) {
		got, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "victim"})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == shoalv1.SandboxPhase_ERROR && strings.Contains(got.Status.Message, "removed outside shoal"), nil
	})
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "victim", Wait: true}); err != nil {
		t.Fatalf("delete of an ERROR sandbox: %v", err)
	}

	// An orphan: our labels, this node and cluster, no record.
	uid := uuid.NewString()
	resp, err := dc.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: map[string]string{
		docker.LabelManaged: "true", docker.LabelUID: uid, docker.LabelName: "ghost",
		docker.LabelWorkspace: "default", docker.LabelNode: n.Config.ID, docker.LabelCluster: n.ClusterID(),
	}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "orphan container reaped", func() (bool, error) {
		cs, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelUID+"="+uid))})
		return err == nil && len(cs) == 0, err
	})
	// A second container of a live sandbox, not the one its record names
	// (a refresh at start replaced it, and the node stopped before it
	// removed it): reaped too, and the recorded one is left alone.
	kept := mkSandbox(t, ctx, n.Client, "kept", true)
	sib, err := dc.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: map[string]string{
		docker.LabelManaged: "true", docker.LabelUID: kept.Meta.Uid, docker.LabelName: "kept",
		docker.LabelWorkspace: "default", docker.LabelNode: n.Config.ID, docker.LabelCluster: n.ClusterID(),
	}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the replaced container reaped", func() (bool, error) {
		_, err := dc.ContainerInspect(ctx, sib.ID)
		return cerrdefs.IsNotFound(err), nil
	})
	if st, err := dc.ContainerInspect(ctx, kept.Status.ContainerId); err != nil || !st.State.Running {
		t.Fatalf("the recorded container of a live sandbox: %v %+v", err, st.State)
	}
	// The agent counts a reap after the engine has removed the container,
	// so the count may trail the list above by a moment: wait for it, but
	// a removal by anything other than the agent never raises it.
	testenv.Eventually(t, 30*time.Second, "the agent counted the reaps", func() (bool, error) {
		return n.OrphansReaped() >= 2, nil
	})
	// ... and so does its metric; the delete was a teardown.
	fams := scrape(t, metricsAddr)
	if v := value(fams, "shoal_orphans_reaped_total", nil); v < 1 {
		t.Errorf("shoal_orphans_reaped_total = %v after a reap", v)
	}
	if v := value(fams, "shoal_teardown_duration_seconds", nil); v < 1 {
		t.Errorf("shoal_teardown_duration_seconds counts %v teardowns after a delete", v)
	}
}

// f. A stale delete with an old uid precondition against a same-name
// replacement fails and leaves the replacement intact.
func TestStaleDeleteSparesReplacement(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 5*time.Minute)
	old := mkSandbox(t, ctx, n.Client, "same", true)
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "same", Wait: true}); err != nil {
		t.Fatal(err)
	}
	repl := mkSandbox(t, ctx, n.Client, "same", true)
	_, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "same", Preconditions: &shoalv1.Preconditions{Uid: old.Meta.Uid}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale delete: %v, want FAILED_PRECONDITION", err)
	}
	_, err = n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "same", Preconditions: &shoalv1.Preconditions{ResourceVersion: old.Meta.ResourceVersion}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale resource_version delete: %v, want FAILED_PRECONDITION", err)
	}
	got, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "same"})
	if err != nil || got.Meta.Uid != repl.Meta.Uid || got.Meta.DeletionTimestamp != nil || got.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("replacement touched: %v %v", got, err)
	}
	// The right uid deletes it.
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "same", Wait: true, Preconditions: &shoalv1.Preconditions{Uid: repl.Meta.Uid}}); err != nil {
		t.Fatal(err)
	}
}

// Provider delete while only DELETING sandboxes hold it is accepted, and
// with wait returns when the provider is gone.
func TestProviderTerminatingUntilReleased(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 5*time.Minute)
	mkProvider(t, ctx, n.Client, "p")
	mkSandbox(t, ctx, n.Client, "holder", true, "p")
	_, err := n.Client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "p"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "holder") {
		t.Fatalf("delete of a provider a live sandbox uses: %v", err)
	}
	// Mark the holder DELETING through the store, then delete the provider
	// with wait: the coordinator releases and removes both.
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "holder"}); err != nil {
		t.Fatal(err)
	}
	resp, err := n.Client.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "p", Wait: true})
	if err != nil || !resp.Deleted {
		t.Fatalf("provider delete with wait: %v %v", resp, err)
	}
	if _, err := n.Client.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"}); status.Code(err) != codes.NotFound {
		t.Fatalf("provider still there: %v", err)
	}
}

// Every sandbox's logs are bounded: a node refuses log bounds below 1 MiB
// or 1 file, naming the flags.
func TestSandboxLogBoundsAreRequired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bytes int64
		files int
	}{{0, 3}, {10 << 20, 0}, {1 << 19, 3}, {-1, 3}} {
		cfg := testenv.NodeConfig(t)
		cfg.SandboxLogMaxBytes, cfg.SandboxLogFiles = tc.bytes, tc.files
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--sandbox-log-max-mib, --sandbox-log-files") {
			t.Errorf("%d bytes × %d files: %v", tc.bytes, tc.files, err)
		}
	}
	cfg := testenv.NodeConfig(t)
	if err := cfg.Validate(); err != nil || cfg.SandboxLogMaxBytes != 10<<20 || cfg.SandboxLogFiles != 3 {
		t.Fatalf("defaults: %d bytes × %d files, %v", cfg.SandboxLogMaxBytes, cfg.SandboxLogFiles, err)
	}
}
