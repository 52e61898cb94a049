package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// OpenShell's API on shoal (issue 24, section 4): each figure is a call
// through openshell.v1 against its shoal.v1 twin, on the same node over
// gRPC, side by side in rounds that alternate which side goes first, so
// that a busy machine weighs on both alike.

// openShellClient is an openshell.v1 client of n, on its own connection.
func openShellClient(b *testing.B, n *testenv.Node) openshellv1.OpenShellClient {
	b.Helper()
	tr, err := n.Config.TLS.Transport()
	if err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return openshellv1.NewOpenShellClient(conn)
}

// alternate runs a then b in even rounds, b then a in odd ones.
func alternate(round int, a, b func()) {
	if round%2 == 0 {
		a()
		b()
	} else {
		b()
		a()
	}
}

func total(d []time.Duration) (s time.Duration) {
	for _, x := range d {
		s += x
	}
	return s
}

// The poll interval of both sides' create-to-READY: OpenShell's
// CreateSandbox has no wait, and its clients poll GetSandbox (or watch).
const readyPoll = 5 * time.Millisecond

// poll waits out one poll interval, or until ctx ends (the next call then
// fails with it).
func poll(ctx context.Context) {
	t := time.NewTimer(readyPoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// CreateSandbox → READY of a real Docker sandbox (the default image)
// through openshell.v1 vs through shoal.v1: each side creates without
// waiting and polls its own GetSandbox every readyPoll until READY, so the
// ratio is the compat layer's. shoal.v1's own create --wait (a watch on
// the node) is reported beside them, for reference. Goal: ratio ≤ 1.05.
func BenchmarkOpenShellCreateToReady(b *testing.B) {
	testenv.RequireDocker(b)
	n := testenv.StartNode(b, testenv.NodeConfig(b))
	osc := openShellClient(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	viaOpenShell := func(name string) time.Duration {
		t0 := time.Now()
		if _, err := osc.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: name, Spec: &openshellv1.SandboxSpec{}}); err != nil {
			b.Fatalf("openshell.v1 create %s: %v", name, err)
		}
		for {
			r, err := osc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name})
			if err != nil {
				b.Fatalf("openshell.v1 get %s: %v", name, err)
			}
			switch r.Sandbox.GetStatus().GetPhase() {
			case openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
				return time.Since(t0)
			case openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR:
				b.Fatalf("openshell.v1 %s: ERROR: %v", name, r.Sandbox.GetStatus())
			}
			poll(ctx)
		}
	}
	viaShoal := func(name string) time.Duration {
		t0 := time.Now()
		if _, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}}); err != nil {
			b.Fatalf("shoal.v1 create %s: %v", name, err)
		}
		for {
			sb, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
			if err != nil {
				b.Fatalf("shoal.v1 get %s: %v", name, err)
			}
			switch sb.GetStatus().GetPhase() {
			case shoalv1.SandboxPhase_READY:
				return time.Since(t0)
			case shoalv1.SandboxPhase_ERROR:
				b.Fatalf("shoal.v1 %s: ERROR: %v", name, sb.GetStatus())
			}
			poll(ctx)
		}
	}
	viaShoalWait := func(name string) time.Duration {
		t0 := time.Now()
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}})
		d := time.Since(t0)
		if err != nil || sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_READY {
			b.Fatalf("shoal.v1 create --wait %s: %v %v", name, sb.GetStatus().GetPhase(), err)
		}
		return d
	}
	remove := func(names ...string) {
		for _, name := range names {
			if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true}); err != nil {
				b.Fatalf("delete %s: %v", name, err)
			}
		}
	}
	var tOS, tShoal, tWait []time.Duration
	b.ResetTimer()
	for i := range b.N {
		osName, sh, w := fmt.Sprintf("os%d", i), fmt.Sprintf("sh%d", i), fmt.Sprintf("w%d", i)
		alternate(i, func() { tOS = append(tOS, viaOpenShell(osName)) }, func() { tShoal = append(tShoal, viaShoal(sh)) })
		tWait = append(tWait, viaShoalWait(w))
		b.StopTimer()
		remove(osName, sh, w)
		b.StartTimer()
	}
	b.StopTimer()
	mOS, mShoal := median(tOS), median(tShoal)
	b.ReportMetric(float64(mOS.Microseconds())/1000, "openshell-p50-ms")
	b.ReportMetric(float64(mShoal.Microseconds())/1000, "shoal-p50-ms")
	b.ReportMetric(float64(median(tWait).Microseconds())/1000, "shoal-wait-p50-ms")
	b.ReportMetric(float64(mOS)/float64(mShoal), "p50-ratio")
	b.ReportMetric(float64(total(tOS))/float64(total(tShoal)), "mean-ratio")
}

// GetSandbox and ListSandboxes through openshell.v1 vs shoal.v1 on one
// node (hollow runtime) holding 1,000 READY sandboxes:
//
//   - get: one sandbox (goal: ratio ≤ 1.1);
//   - list: the whole list, 1,000 sandboxes (openshell.v1 limit 1000, one
//     call; shoal.v1 page_size 1000, as many pages as its byte cap makes)
//     (goal ≤ 1.1);
//   - page: the first page of 100 (openshell.v1 limit 100, which sorts the
//     whole list by creation time and cuts its page out of it; shoal.v1
//     page_size 100, in key order).
//
// Figures are the medians of -benchtime × (2,000 gets, 100 lists, 500
// pages) per side, over gRPC, the response decoded by the client.
func BenchmarkOpenShellGetListVsShoal(b *testing.B) {
	const sandboxes, gets, lists, pages = 1000, 2000, 100, 500
	cfg := testenv.NodeConfig(b)
	cfg.Runtime = node.RuntimeHollow
	// The default resync (testenv's is 300 ms): the agent's status pass
	// over 1,000 sandboxes would otherwise be most of the load.
	cfg.Resync = node.DefaultConfig().Resync
	n := testenv.StartNode(b, cfg)
	osc := openShellClient(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fillThroughAPI(b, ctx, n.Client, sandboxes)

	type pair struct {
		name      string
		rounds    int
		os, shoal func()
	}
	pairs := []pair{
		{"get", gets, func() {
			if _, err := osc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "s000500"}); err != nil {
				b.Fatal(err)
			}
		}, func() {
			if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s000500"}); err != nil {
				b.Fatal(err)
			}
		}},
		{"list", lists, func() {
			r, err := osc.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: sandboxes})
			if err != nil || len(r.Sandboxes) != sandboxes {
				b.Fatalf("openshell.v1 list: %d sandboxes, %v", len(r.GetSandboxes()), err)
			}
		}, func() {
			got, token := 0, ""
			for {
				r, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: sandboxes, PageToken: token})
				if err != nil {
					b.Fatal(err)
				}
				got += len(r.Items)
				if token = r.NextPageToken; token == "" {
					break
				}
			}
			if got != sandboxes {
				b.Fatalf("shoal.v1 list: %d sandboxes", got)
			}
		}},
		{"page", pages, func() {
			r, err := osc.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 100})
			if err != nil || len(r.Sandboxes) != 100 {
				b.Fatalf("openshell.v1 page: %d sandboxes, %v", len(r.GetSandboxes()), err)
			}
		}, func() {
			r, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 100})
			if err != nil || len(r.Items) != 100 {
				b.Fatalf("shoal.v1 page: %d sandboxes, %v", len(r.GetItems()), err)
			}
		}},
	}
	times := make(map[string][2][]time.Duration)
	timed := func(f func()) time.Duration { t0 := time.Now(); f(); return time.Since(t0) }
	b.ResetTimer()
	for range b.N {
		for _, p := range pairs {
			t := times[p.name]
			for r := range p.rounds {
				alternate(r, func() { t[0] = append(t[0], timed(p.os)) }, func() { t[1] = append(t[1], timed(p.shoal)) })
			}
			times[p.name] = t
		}
	}
	b.StopTimer()
	for _, p := range pairs {
		t := times[p.name]
		mOS, mShoal := median(t[0]), median(t[1])
		b.ReportMetric(float64(mOS.Nanoseconds())/1000, p.name+"-openshell-p50-µs")
		b.ReportMetric(float64(mShoal.Nanoseconds())/1000, p.name+"-shoal-p50-µs")
		b.ReportMetric(float64(mOS)/float64(mShoal), p.name+"-p50-ratio")
		b.ReportMetric(float64(total(t[0]))/float64(total(t[1])), p.name+"-mean-ratio")
	}
}

// fillThroughAPI creates n sandboxes s000000… through the API, 16 at a
// time, and waits until every one is READY.
func fillThroughAPI(b *testing.B, ctx context.Context, cl shoalv1.ShoalClient, n int) {
	b.Helper()
	const workers = 16
	names := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for name := range names {
				if _, err := cl.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name,
					Labels: map[string]string{"team": "bench"}}}}); err != nil {
					errs <- fmt.Errorf("create %s: %w", name, err)
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case names <- fmt.Sprintf("s%06d", i):
		case err := <-errs:
			close(names)
			wg.Wait()
			b.Fatal(err)
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	testenv.Eventually(b, 5*time.Minute, fmt.Sprintf("%d sandboxes READY", n), func() error {
		ready, token := 0, ""
		for {
			r, err := cl.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageToken: token})
			if err != nil {
				return err
			}
			for _, sb := range r.Items {
				if sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_READY {
					ready++
				}
			}
			if token = r.NextPageToken; token == "" {
				break
			}
		}
		if ready < n {
			return fmt.Errorf("%d READY", ready)
		}
		return nil
	})
}
