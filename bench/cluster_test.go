package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/registry"
	"shoal/store"
)

// The cluster benchmarks run real node processes (internal/testenv's
// cluster harness: each node a child process of the built binary with its
// own Docker engine where it can have one) or, for throughput, in-process
// nodes. Each runs once (-benchtime 1x) and reports its figures as
// metrics; docs/benchmarks.md records them.

// termWatch follows the leader's term record (package lease): every new
// leader's first fenced write.
type termWatch struct {
	mu    sync.Mutex
	terms []term
	news  chan struct{}
}

type term struct {
	node string
	at   time.Time // when the watch delivered it
}

func watchTerms(b *testing.B, c *clientv3.Client) *termWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &termWatch{news: make(chan struct{}, 1)}
	key := store.New(c, store.Options{}).LeaderTermKey()
	ch := c.Watch(ctx, key)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range ch {
			at := time.Now()
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				var rec struct{ Node string }
				if json.Unmarshal(ev.Kv.Value, &rec) != nil {
					continue
				}
				w.mu.Lock()
				w.terms = append(w.terms, term{rec.Node, at})
				w.mu.Unlock()
				select {
				case w.news <- struct{}{}:
				default:
				}
			}
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
	return w
}

// next waits for a term recorded by a node other than old, after since.
func (w *termWatch) next(b *testing.B, old string, since time.Time, within time.Duration) term {
	b.Helper()
	deadline := time.After(within)
	for {
		w.mu.Lock()
		for _, t := range w.terms {
			if t.node != old && t.at.After(since) {
				w.mu.Unlock()
				return t
			}
		}
		w.mu.Unlock()
		select {
		case <-w.news:
		case <-deadline:
			b.Fatalf("no new leader (other than %s) within %s", old, within)
		}
	}
}

func leaderIndex(b *testing.B, c *testenv.Cluster) (int, string) {
	b.Helper()
	var idx int
	var id string
	testenv.Eventually(b, 30*time.Second, "a leader known", func() (bool, error) {
		st, err := c.ClusterClient(0).Status(context.Background(), &shoalv1.ClusterStatusRequest{})
		if err != nil {
			return false, err
		}
		for i := 0; i < c.Len(); i++ {
			if c.ID(i) == st.LeaderNode {
				idx, id = i, st.LeaderNode
				return true, nil
			}
		}
		return false, fmt.Errorf("leader %q", st.LeaderNode)
	})
	return idx, id
}

func quantiles(d []time.Duration) (p50, p99, max time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return percentile(s, 0.50), percentile(s, 0.99), s[len(s)-1]
}

const benchLeaseTTL = 2 * time.Second

// Leader SIGKILL → the new leader's first fenced write (its term record),
// 20 kills, each followed by a restart of the killed node; then graceful
// stops (SIGTERM: the leader resigns) → the new leader's term record.
// Three worker nodes on one etcd, leader lease TTL 2s.
func BenchmarkLeaderFailover(b *testing.B) {
	testenv.RequireDocker(b)
	c := testenv.StartCluster(b, testenv.ClusterConfig{Nodes: 3, LeaseTTL: benchLeaseTTL})
	w := watchTerms(b, c.Etcd())
	var kills, stops []time.Duration
	for range b.N {
		for range 20 {
			i, id := leaderIndex(b, c)
			t0 := time.Now()
			c.Kill(i)
			t := w.next(b, id, t0, benchLeaseTTL+30*time.Second)
			kills = append(kills, t.at.Sub(t0))
			c.Restart(i)
		}
		for range 5 {
			i, id := leaderIndex(b, c)
			t0 := time.Now()
			c.Shutdown(i)
			t := w.next(b, id, t0, benchLeaseTTL+30*time.Second)
			stops = append(stops, t.at.Sub(t0))
			c.Restart(i)
		}
	}
	p50, p99, max := quantiles(kills)
	b.ReportMetric(p50.Seconds(), "kill-p50-s")
	b.ReportMetric(p99.Seconds(), "kill-p99-s")
	b.ReportMetric(max.Seconds(), "kill-max-s")
	p50, _, max = quantiles(stops)
	b.ReportMetric(float64(p50.Milliseconds()), "stop-p50-ms")
	b.ReportMetric(float64(max.Milliseconds()), "stop-max-ms")
	b.Logf("lease TTL %s; SIGKILL → new term: %v; SIGTERM → new term: %v", benchLeaseTTL, kills, stops)
}

// Owner SIGKILL → `shoal sandbox delete --wait` (through the other node,
// the built binary) of a sandbox of the killed node done, five times, node
// TTL 2s and the default fence margin (one TTL).
func BenchmarkOwnerLossDelete(b *testing.B) {
	testenv.RequireDocker(b)
	const ttl = 2 * time.Second
	c := testenv.StartCluster(b, testenv.ClusterConfig{Nodes: 2, LeaseTTL: benchLeaseTTL,
		OrphanGrace: time.Hour, Args: []string{"--node-ttl", ttl.String()}})
	bin := testenv.Binary(b)
	ctx := context.Background()
	var took []time.Duration
	for r := range 5 * b.N {
		name := fmt.Sprintf("lost%d", r)
		if _, err := c.Client(0).CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true,
			Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: c.ID(1)}}}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c.Kill(1)
		out, err := exec.Command(bin, "--endpoint", c.Addr(0), "sandbox", "delete", name, "--wait").CombinedOutput()
		if err != nil {
			b.Fatalf("delete --wait: %v\n%s", err, out)
		}
		took = append(took, time.Since(t0))
		c.Restart(1)
	}
	p50, _, max := quantiles(took)
	b.ReportMetric(p50.Seconds(), "p50-s")
	b.ReportMetric(max.Seconds(), "max-s")
	b.ReportMetric((2*ttl + 5*time.Second).Seconds(), "target-s")
	b.Logf("node TTL %s, fence margin %s; owner SIGKILL → delete --wait done: %v", ttl, ttl, took)
}

// Create-to-READY and `exec -- true` through a node that does not own the
// sandbox (it forwards exec to the owner) vs through the owner, interleaved,
// on two nodes with their own engines.
func BenchmarkForwarding(b *testing.B) {
	testenv.RequireDocker(b)
	c := testenv.StartCluster(b, testenv.ClusterConfig{Nodes: 2, LeaseTTL: benchLeaseTTL})
	if !c.SeparateEngines() {
		b.Log("the nodes share one Docker engine here")
	}
	ctx := context.Background()
	owner, other := c.Client(1), c.Client(0)
	const creates, execs = 30, 300
	var viaOwner, viaOther time.Duration
	create := func(cl shoalv1.ShoalClient, name string) time.Duration {
		t0 := time.Now()
		sb, err := cl.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true,
			Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: c.ID(1)}}})
		d := time.Since(t0)
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			b.Fatalf("create %s: %v %v", name, sb.GetStatus(), err)
		}
		return d
	}
	for i := range creates * b.N {
		a, o := fmt.Sprintf("o%d", i), fmt.Sprintf("f%d", i)
		if i%2 == 0 {
			viaOwner += create(owner, a)
			viaOther += create(other, o)
		} else {
			viaOther += create(other, o)
			viaOwner += create(owner, a)
		}
	}
	exe := func(cl shoalv1.ShoalClient) time.Duration {
		t0 := time.Now()
		st, err := cl.Exec(ctx, &shoalv1.ExecRequest{Name: "o0", Command: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		var last *shoalv1.ExecChunk
		for {
			ch, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			last = ch
		}
		d := time.Since(t0)
		if last == nil || !last.Exited || last.ExitCode != 0 {
			b.Fatalf("exec true: last chunk %v", last)
		}
		return d
	}
	var exOwner, exOther []time.Duration
	for i := range execs * b.N {
		if i%2 == 0 {
			exOwner = append(exOwner, exe(owner))
			exOther = append(exOther, exe(other))
		} else {
			exOther = append(exOther, exe(other))
			exOwner = append(exOwner, exe(owner))
		}
	}
	b.ReportMetric(float64(viaOther.Milliseconds())/float64(creates*b.N), "create-other-ms")
	b.ReportMetric(float64(viaOwner.Milliseconds())/float64(creates*b.N), "create-owner-ms")
	b.ReportMetric(float64(viaOther)/float64(viaOwner), "create-ratio")
	sum := func(d []time.Duration) (s time.Duration) {
		for _, x := range d {
			s += x
		}
		return s
	}
	p50o, _, _ := quantiles(exOwner)
	p50f, _, _ := quantiles(exOther)
	b.ReportMetric(float64(p50f.Microseconds())/1000, "exec-other-p50-ms")
	b.ReportMetric(float64(p50o.Microseconds())/1000, "exec-owner-p50-ms")
	b.ReportMetric(float64(sum(exOther))/float64(sum(exOwner)), "exec-ratio")
}

// Creates per second from 32 concurrent clients: one node vs a cluster of
// three embedded etcd voters with the clients spread over its nodes,
// in-process, side by side. The sandboxes are placed (spec.node) on a node
// that the benchmark registers itself and that runs no agent, so the
// figure is the API's: validation, placement and the create's Txn,
// replicated by etcd. Starting containers is Docker's work, measured by
// BenchmarkCreateToReady; here it would bury the difference.
func BenchmarkCreateThroughput(b *testing.B) {
	testenv.RequireDocker(b)
	const clients, perClient = 32, 32
	one := testenv.StartNodes(b, benchNodeConfig(b, "solo"))
	var cfgs []node.Config
	var ic []string
	for _, name := range []string{"v1", "v2", "v3"} {
		cfg := benchNodeConfig(b, name)
		cfgs = append(cfgs, cfg)
		ic = append(ic, cfg.ID+"="+cfg.EtcdListenPeer)
	}
	for i := range cfgs {
		cfgs[i].EtcdInitialCluster = strings.Join(ic, ",")
	}
	three := testenv.StartNodes(b, cfgs...)
	ghost1 := registerIdleNode(b, one[0].Config.EtcdListenClient)
	ghost3 := registerIdleNode(b, three[0].Config.EtcdListenClient)

	run := func(nodes []*testenv.Node, ghost string, round int) float64 {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		t0 := time.Now()
		for k := range clients {
			cl := nodes[k%len(nodes)].Client
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range perClient {
					name := fmt.Sprintf("r%dc%dn%d", round, k, j)
					if _, err := cl.CreateSandbox(context.Background(), &shoalv1.CreateSandboxRequest{
						Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Node: ghost}}}); err != nil {
						errs <- fmt.Errorf("create %s: %w", name, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(clients*perClient) / d.Seconds()
	}
	var r1, r3 []float64
	for round := range 3 * b.N {
		r1 = append(r1, run(one, ghost1, round))
		r3 = append(r3, run(three, ghost3, round))
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	b.ReportMetric(mean(r1), "one-node-creates/s")
	b.ReportMetric(mean(r3), "three-voters-creates/s")
	b.ReportMetric(mean(r3)/mean(r1), "ratio")
	b.Logf("rounds of %d creates: one node %.0f/s, three voters %.0f/s", clients*perClient, r1, r3)
}

// registerIdleNode registers a node that runs no agent (its registry entry
// only, kept alive until the benchmark ends) and returns its id.
func registerIdleNode(b *testing.B, endpoint string) string {
	b.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	id := fmt.Sprintf("idle%x", time.Now().UnixNano()%0xffffff)
	reg, err := registry.New(registry.Config{Store: store.New(c, store.Options{}), Etcd: c,
		Node: &shoalv1.Node{Name: id, Address: "127.0.0.1:1", Version: "bench"}, Instance: id, TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := reg.Register(ctx); err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reg.Start(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("idle node registry: %v", err)
		}
		c.Close()
	})
	return id
}

func benchNodeConfig(b *testing.B, name string) node.Config {
	cfg := testenv.NodeConfig(b)
	cfg.ID += "-" + name
	return cfg
}
