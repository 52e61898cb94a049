package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
)

// egressScaleSandboxes is how many sandboxes with egress rules the node
// of BenchmarkEgressPolicyAtScale runs (issue 25, section 4: 1,000).
const egressScaleSandboxes = 1000

// BenchmarkEgressPolicyAtScale measures a policy change to its
// enforcement with 1,000 sandboxes on one node (issue 25, section 4: p99
// ≤ 1 s). The node is hollow with --hollow-egress: its containers are
// simulated, its egress is not (the agent serves each sandbox's socket,
// the node's proxy admits each connection by the sandbox's policy); a
// connection to a sandbox's socket is what its sidecar would relay.
//
// Each round changes the policy of every sandbox, 16 writers at once,
// each from allowing upstream A to allowing upstream B, and times from
// each write's response:
//
//   - enforced: until a request to A through the sandbox's socket is
//     refused (the writer's next requests after its write);
//   - applied: until the sandbox's status reports the new version (the
//     agent has synced it, with 999 others changing; lists of every
//     sandbox polled every 20 ms).
func BenchmarkEgressPolicyAtScale(b *testing.B) {
	cfg := testenv.NodeConfig(b)
	cfg.Runtime, cfg.HollowEgress = node.RuntimeHollow, true
	n := testenv.StartNode(b, cfg)
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	host := testenv.HostAddr(b).String()
	up := func() int {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		b.Cleanup(func() { srv.Close(); <-done })
		return ln.Addr().(*net.TCPAddr).Port
	}
	ports := [2]int{up(), up()}
	rule := func(port int) *shoalv1.EgressRule {
		return &shoalv1.EgressRule{Host: host, Ports: []uint32{uint32(port)}}
	}
	url := func(port int) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/" }
	names := make([]string, egressScaleSandboxes)
	for i := range names {
		names[i] = fmt.Sprintf("eg%04d", i)
	}
	// each runs f for every index on width goroutines.
	each := func(width int, f func(i int)) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range width {
			wg.Go(func() {
				for i := range next {
					f(i)
				}
			})
		}
		for i := range names {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	uids := make([]string, len(names))
	each(16, func(i int) {
		sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: names[i]},
			Spec: &shoalv1.SandboxSpec{Egress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(ports[0])}}}}})
		if err != nil {
			b.Errorf("create %s: %v", names[i], err)
			return
		}
		uids[i] = sb.Meta.Uid
	})
	if b.Failed() {
		b.FailNow()
	}
	// applied lists every sandbox and reports those whose applied
	// version is at least want's.
	applied := func(want []int64) (map[string]bool, error) {
		out := map[string]bool{}
		tok := ""
		for {
			page, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000, PageToken: tok})
			if err != nil {
				return nil, err
			}
			for _, sb := range page.Items {
				var i int
				if _, err := fmt.Sscanf(sb.Meta.Name, "eg%d", &i); err == nil && sb.GetStatus().GetEgressAppliedVersion() >= want[i] {
					out[sb.Meta.Name] = true
				}
			}
			if tok = page.NextPageToken; tok == "" {
				return out, nil
			}
		}
	}
	versions := make([]int64, len(names))
	for i := range versions {
		versions[i] = 1
	}
	testenv.Eventually(b, 10*time.Minute, "every sandbox's first policy applied", func() (bool, error) {
		got, err := applied(versions)
		return len(got) == len(names), err
	})
	socket := func(i int) string { return filepath.Join(cfg.DataDir, "egress", uids[i], "s") }
	if code, body := testenv.SocketGet(b, socket(0), url(ports[0])); code != http.StatusOK {
		b.Fatalf("an allowed request before the change: %d %q", code, body)
	}

	var enforced, appliedAfter []time.Duration
	b.ResetTimer()
	for round := range b.N {
		from, to := ports[round%2], ports[(round+1)%2]
		var mu sync.Mutex
		written := make([]time.Time, len(names)) // zero until written
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			done := make([]bool, len(names))
			left := len(names)
			for deadline := time.Now().Add(5 * time.Minute); left > 0 && time.Now().Before(deadline); <-tick.C {
				mu.Lock()
				want := slices.Clone(versions)
				at := slices.Clone(written)
				mu.Unlock()
				got, err := applied(want)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now() // after the list: at most its latency late, besides the period
				for i, name := range names {
					if !done[i] && !at[i].IsZero() && got[name] {
						done[i] = true
						left--
						mu.Lock()
						appliedAfter = append(appliedAfter, now.Sub(at[i]))
						mu.Unlock()
					}
				}
			}
			if left > 0 {
				b.Errorf("%d sandboxes never reported the new version", left)
			}
		})
		each(16, func(i int) {
			upd, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: names[i], SetEgress: &shoalv1.EgressPolicy{Rules: []*shoalv1.EgressRule{rule(to)}}})
			if err != nil {
				b.Errorf("update %s: %v", names[i], err)
				return
			}
			at := time.Now()
			mu.Lock()
			written[i], versions[i] = at, upd.Spec.Egress.Version
			mu.Unlock()
			// The first connection after the write's response, and the
			// next ones until one is refused.
			for deadline := at.Add(time.Minute); time.Now().Before(deadline); {
				code, body, err := testenv.TrySocketGet(socket(i), url(from))
				if err != nil {
					b.Errorf("%s: %v", names[i], err)
					return
				}
				if code == http.StatusForbidden {
					mu.Lock()
					enforced = append(enforced, time.Since(at))
					mu.Unlock()
					return
				}
				if code != http.StatusOK {
					b.Errorf("%s: %d %q", names[i], code, body)
					return
				}
			}
			b.Errorf("%s: the old destination is still admitted a minute after the change", names[i])
		})
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
	}
	b.StopTimer()
	if b.Failed() {
		return
	}
	if code, body := testenv.SocketGet(b, socket(0), url(ports[b.N%2])); code != http.StatusOK {
		b.Fatalf("the new destination after the change: %d %q", code, body)
	}
	p50, p99, worst := quantiles(enforced)
	b.ReportMetric(float64(p50.Microseconds())/1000, "enforced-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "enforced-p99-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "enforced-max-ms")
	p50, p99, worst = quantiles(appliedAfter)
	b.ReportMetric(float64(p50.Microseconds())/1000, "applied-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "applied-p99-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "applied-max-ms")
}
