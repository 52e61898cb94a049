package openshellapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// The seed race through the OpenShell API: a sandbox attached to a
// provider is deleted while 16 writers change its labels (through
// shoal.v1, on every node) and an outside etcd client rewrites its key
// with identical bytes; the provider's delete comes right after. Both
// succeed, every round: the delete is deleted=true, the provider becomes
// terminating (deleted=true) and is gone once the sandbox is.
func TestSeedRace(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := ctxT(t, 5*time.Minute)
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{c.nodes[0].EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	var writes atomic.Int64
	for r := range rounds {
		if err := seedRound(t, ctx, c, raw, r, &writes); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
	}
	if writes.Load() < int64(rounds) {
		t.Fatalf("only %d concurrent writes landed over %d rounds: the race was not exercised", writes.Load(), rounds)
	}
}

func seedRound(t *testing.T, ctx context.Context, c *cluster, raw *clientv3.Client, r int, writes *atomic.Int64) error {
	pn, name := fmt.Sprintf("p%d", r), fmt.Sprintf("seed%d", r)
	osh := c.os[r%3]
	if _, err := osh.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: pn}, Type: "nvidia", Credentials: map[string]string{"NVIDIA_API_KEY": "nvapi-" + pn}}}); err != nil {
		return fmt.Errorf("create provider: %w", err)
	}
	if _, err := osh.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: name, Labels: map[string]string{"n": "0"},
		Spec: &openshellv1.SandboxSpec{Providers: []string{pn}}}); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	key := c.nodes[0].Store().SandboxKey("default", name)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	over := func(err error) bool {
		return status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition ||
			strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "is being deleted")
	}
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.nodes[w%3].Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: name, SetLabels: map[string]string{fmt.Sprintf("w%d", w): fmt.Sprint(i)}})
				if err != nil {
					if !over(err) {
						errs <- fmt.Errorf("writer %d: %w", w, err)
					}
					return // deletion requested: the sandbox is frozen
				}
				writes.Add(1)
			}
		})
	}
	wg.Go(func() { // identical-byte rewrites from outside shoal
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := raw.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				if err == nil {
					return
				}
				continue
			}
			kv := resp.Kvs[0]
			_, _ = raw.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(clientv3.OpPut(key, string(kv.Value))).Commit()
		}
	})
	del, derr := c.os[(r+1)%3].DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name})
	pdel, perr := c.os[(r+2)%3].DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: pn})
	close(stop)
	wg.Wait()
	close(errs)
	if derr != nil || !del.GetDeleted() {
		return fmt.Errorf("DeleteSandbox under 16 writers: %v, %v", del, derr)
	}
	if perr != nil || !pdel.GetDeleted() {
		return fmt.Errorf("DeleteProvider right after: %v, %v", pdel, perr)
	}
	if err := <-errs; err != nil {
		return err
	}
	// Terminating until the sandbox is gone, then gone.
	testenv.Eventually(t, 60*time.Second, "provider "+pn+" gone after its sandbox", func() (bool, error) {
		_, err := osh.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: pn})
		if status.Code(err) == codes.NotFound {
			return true, nil
		}
		return false, err
	})
	return nil
}
