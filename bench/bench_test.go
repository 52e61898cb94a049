package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

// One uncontended update through the update loop vs the raw clientv3 calls
// the same work needs (Get + Txn): with the store reading etcd (etcd), and
// with its watch cache on (cache: the loop starts from the cached copy or
// the node's own last write, so it is one Txn).
func BenchmarkUpdateLoopVsRaw(b *testing.B) {
	b.Run("etcd", func(b *testing.B) {
		c, _ := testenv.Etcd(b)
		updateLoopVsRaw(b, c, store.New(c, store.Options{}))
	})
	b.Run("cache", func(b *testing.B) {
		c, _ := testenv.Etcd(b)
		s, _ := cachedStore(b, c)
		updateLoopVsRaw(b, c, s)
	})
}

func updateLoopVsRaw(b *testing.B, c *clientv3.Client, s *store.Store) {
	ctx := context.Background()
	if _, err := s.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "loop"}, Spec: &shoalv1.SandboxSpec{}}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "raw"}, Spec: &shoalv1.SandboxSpec{}}); err != nil {
		b.Fatal(err)
	}
	rawKey := s.SandboxKey("default", "raw")
	loop := func(i int) {
		if _, err := s.UpdateSandbox(ctx, "default", "loop", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
			sb.Status.Message = fmt.Sprint(i)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	raw := func(i int) {
		resp, err := c.Get(ctx, rawKey)
		if err != nil {
			b.Fatal(err)
		}
		kv := resp.Kvs[0]
		tx, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(rawKey), "=", kv.ModRevision)).
			Then(clientv3.OpPut(rawKey, string(kv.Value))).Else(clientv3.OpGet(rawKey)).Commit()
		if err != nil || !tx.Succeeded {
			b.Fatal(err)
		}
	}
	var tLoop, tRaw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Interleave so both see the same machine state.
		t0 := time.Now()
		loop(i)
		t1 := time.Now()
		raw(i)
		tRaw += time.Since(t1)
		tLoop += t1.Sub(t0)
	}
	b.ReportMetric(float64(tLoop.Nanoseconds())/float64(b.N), "loop-ns/op")
	b.ReportMetric(float64(tRaw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(tLoop)/float64(tRaw), "ratio")
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// DeleteSandbox latency (the API call, without wait) with 0 and with 16
// concurrent writers on the sandbox being deleted.
func BenchmarkDeleteSandboxLatency(b *testing.B) {
	testenv.RequireDocker(b)
	n := testenv.StartNode(b, testenv.NodeConfig(b))
	ctx := context.Background()
	samples := 1000
	measure := func(writers int) []time.Duration {
		var lat []time.Duration
		for i := 0; i < samples; i++ {
			name := fmt.Sprintf("d%d-%d", writers, i)
			// Measure the control plane, not Docker: the sandbox is made in
			// the store, assigned to a node that does not run, so no
			// container is made (the API refuses a missing image now).
			sb := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Image: docker.DefaultImage},
				Status: &shoalv1.SandboxStatus{Node: "bench-no-node"}}
			if _, err := n.Store().CreateSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; ; j++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := n.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: name, SetLabels: map[string]string{fmt.Sprintf("w%d", w): fmt.Sprint(j)}}); err != nil {
							return
						}
					}
				}()
			}
			t0 := time.Now()
			_, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name})
			lat = append(lat, time.Since(t0))
			close(stop)
			wg.Wait()
			if err != nil {
				b.Fatalf("delete under %d writers: %v", writers, err)
			}
		}
		return lat
	}
	for i := 0; i < b.N; i++ {
		idle := measure(0)
		busy := measure(16)
		b.ReportMetric(float64(percentile(idle, 0.5).Microseconds()), "idle-p50-us")
		b.ReportMetric(float64(percentile(idle, 0.99).Microseconds()), "idle-p99-us")
		b.ReportMetric(float64(percentile(busy, 0.5).Microseconds()), "16w-p50-us")
		b.ReportMetric(float64(percentile(busy, 0.99).Microseconds()), "16w-p99-us")
		b.ReportMetric(float64(percentile(busy, 0.99))/float64(percentile(idle, 0.99)), "p99-ratio")
	}
}

// Sandbox create-to-READY through the API vs a raw Docker create+start of
// the same image.
func BenchmarkCreateToReady(b *testing.B) {
	dc := testenv.RequireDocker(b)
	n := testenv.StartNode(b, testenv.NodeConfig(b))
	ctx := context.Background()
	var tShoal, tRaw time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}})
		tShoal += time.Since(t0)
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			b.Fatalf("create: %v %v", sb.GetStatus(), err)
		}
		t1 := time.Now()
		resp, err := dc.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: map[string]string{"shoal.dev/bench": "raw"}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err == nil {
			err = dc.ContainerStart(ctx, resp.ID, container.StartOptions{})
		}
		tRaw += time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		dc.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
		if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: sb.Meta.Name, Wait: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tShoal.Milliseconds())/float64(b.N), "shoal-ms/op")
	b.ReportMetric(float64(tRaw.Milliseconds())/float64(b.N), "raw-ms/op")
	b.ReportMetric(float64(tShoal)/float64(tRaw), "ratio")
}
