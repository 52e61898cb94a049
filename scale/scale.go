package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/embedetcd"
	"shoal/internal/backoff"
	"shoal/internal/freeport"
	"shoal/internal/launch"
	"shoal/internal/proc"
	"shoal/lease"
	"shoal/node"
	"shoal/store"
)

// Config of a scale run. DefaultConfig fills it; Validate checks it.
type Config struct {
	// Binary is the shoal executable the nodes run. DefaultConfig leaves
	// it empty (the running program is shoal-lab or a test, never shoal);
	// shoal-lab sets it (--shoal-binary, else shoal beside it or on PATH).
	Binary string
	// RealNodes run the Docker runtime and serve the API the clients use;
	// one of them leads. HollowNodes carry the sandboxes.
	RealNodes, HollowNodes int
	SandboxesPerNode       int
	// Clients create sandboxes concurrently.
	Clients int
	// Growth are the record counts at which the curve is measured; the
	// fleet's total (HollowNodes × SandboxesPerNode) is always a point.
	// Points above it are measured after the node and leader loss figures
	// (which are taken on the fleet as configured), by creating more
	// sandboxes on the live hollow nodes.
	Growth []int
	// NodeTTL and LeaseTTL of every node.
	NodeTTL, LeaseTTL time.Duration
	// HollowLatency of the hollow runtimes.
	HollowLatency time.Duration
	// ReportDir receives report.json, summary.txt and growth.png.
	ReportDir string
	// KeepData keeps the run's directory (etcd data, node logs).
	KeepData bool
	Log      io.Writer
}

// DefaultConfig is the fleet: 3 real nodes, 100 hollow nodes of
// 100 sandboxes each, 64 clients, TTLs of 5 s. With 2 s TTLs, 103 nodes on
// a 2-core machine lapse their leases under the load of the growth creates
// and the run ends (6 of 7 runs, docs/benchmarks.md); the loss targets are
// relative to the TTL.
func DefaultConfig() Config {
	return Config{RealNodes: 3, HollowNodes: 100, SandboxesPerNode: 100, Clients: 64,
		Growth: []int{1000, 10000, 50000}, NodeTTL: 5 * time.Second, LeaseTTL: 5 * time.Second,
		HollowLatency: 5 * time.Millisecond, ReportDir: "scale-report"}
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no shoal binary to start nodes with (Binary; shoal-lab: --shoal-binary)")
	case c.RealNodes < 2 || c.RealNodes > 7:
		return fmt.Errorf("--real-nodes: %d is out of range 2-7 (the leader is killed, another must take over)", c.RealNodes)
	case c.HollowNodes < 2 || c.HollowNodes > 1000:
		return fmt.Errorf("--hollow-nodes: %d is out of range 2-1000 (one is killed)", c.HollowNodes)
	case c.SandboxesPerNode < 1 || c.SandboxesPerNode > 10000:
		return fmt.Errorf("--sandboxes-per-node: %d is out of range 1-10000", c.SandboxesPerNode)
	case c.Clients < 1 || c.Clients > 1024:
		return fmt.Errorf("--clients: %d is out of range 1-1024", c.Clients)
	case c.NodeTTL < time.Second || c.LeaseTTL < time.Second:
		return fmt.Errorf("--node-ttl and --lease-ttl: at least 1s")
	case c.HollowLatency < 0 || c.HollowLatency > time.Minute:
		return fmt.Errorf("--hollow-latency: %s is out of range 0-1m", c.HollowLatency)
	}
	for _, g := range c.Growth {
		switch {
		case g < 1:
			return fmt.Errorf("--growth: %d is not a record count", g)
		case g > MaxGrowth:
			return fmt.Errorf("--growth: %d is above the %d records a run may grow to", g, MaxGrowth)
		}
	}
	return nil
}

// MaxGrowth bounds a growth point: etcd's default 2 GiB quota holds about
// 500,000 sandbox records of this run's size, with room for their history.
const MaxGrowth = 200000

// Point is the growth curve at one record count.
type Point struct {
	Records int `json:"records"`
	// CreateP99 of the creates made just before the point (the last tenth
	// of the way from the previous point).
	CreateP99     time.Duration `json:"create_p99_ns"`
	CreateSamples int           `json:"create_samples"`
	// ListP99 of a paged List of every sandbox (pages of 500) through the
	// API, over ListSamples lists.
	ListP99     time.Duration `json:"list_p99_ns"`
	ListSamples int           `json:"list_samples"`
	// RSSBytes of the node serving the API.
	RSSBytes int64 `json:"rss_bytes"`
	// LiveHeapBytes is its Go heap in use right after a collection
	// (taken after the RSS); the difference is the collector's headroom,
	// freed memory not yet returned to the OS and what is not heap. Its
	// heap profile is saved in the report directory as heap-RECORDS.pb.gz.
	LiveHeapBytes int64 `json:"live_heap_bytes"`
	// Node is the node measured, with its RSS and live heap when it held
	// no sandbox (the figures move to another real node if the leader
	// moves to this one).
	Node              string `json:"node"`
	BaseRSSBytes      int64  `json:"base_rss_bytes"`
	BaseLiveHeapBytes int64  `json:"base_live_heap_bytes"`
}

// Report is what a scale run measured. Durations are in nanoseconds.
type Report struct {
	Config struct {
		RealNodes        int           `json:"real_nodes"`
		HollowNodes      int           `json:"hollow_nodes"`
		SandboxesPerNode int           `json:"sandboxes_per_node"`
		Clients          int           `json:"clients"`
		Growth           []int         `json:"growth"`
		NodeTTL          time.Duration `json:"node_ttl_ns"`
		LeaseTTL         time.Duration `json:"lease_ttl_ns"`
		HollowLatency    time.Duration `json:"hollow_latency_ns"`
	} `json:"config"`
	Started    time.Time     `json:"started"`
	Finished   time.Time     `json:"finished"`
	StartNodes time.Duration `json:"start_nodes_ns"`
	// BaseRSS is the API node's RSS with every node up and no sandbox.
	BaseRSS          int64         `json:"base_rss_bytes"`
	BaseLiveHeap     int64         `json:"base_live_heap_bytes"`
	Creates          int           `json:"creates"`
	CreatesPerSecond float64       `json:"creates_per_second"`
	AllReady         time.Duration `json:"all_ready_ns"`
	Growth           []Point       `json:"growth"`
	// HollowKill: one hollow node SIGKILLed → all its sandboxes UNKNOWN.
	HollowKill      time.Duration `json:"hollow_kill_to_unknown_ns"`
	HollowKillCount int           `json:"hollow_kill_sandboxes"`
	// LeaderKill: the leader SIGKILLed → the new leader's term recorded,
	// → its first resync done (recorded by a fenced write: Term.Synced),
	// and → its first fenced removal (a sandbox deleted at the kill).
	LeaderTerm    time.Duration `json:"leader_kill_to_term_ns"`
	LeaderSynced  time.Duration `json:"leader_kill_to_resync_done_ns"`
	LeaderRemoval time.Duration `json:"leader_kill_to_fenced_removal_ns"`
}

// nodeProc is one node process.
type nodeProc struct {
	id, addr, dir string
	// debug is a real node's pprof address (loopback); baseRSS and
	// baseHeap its RSS and live heap with no sandbox.
	debug             string
	baseRSS, baseHeap int64
	p                 *proc.Process
	conn              *grpc.ClientConn
}

func freePort() (int, error) { return freeport.Get() }

type run struct {
	cfg    Config
	dir    string
	etcd   *embedetcd.Server
	raw    *clientv3.Client
	st     *store.Store
	real   []*nodeProc
	hollow []*nodeProc
	// api is the real node the figures go through (lists, RSS): one that
	// did not lead at the start, so the leader's kill leaves it serving.
	api *nodeProc
	// made is how many sandboxes were created (names s000000 on); records
	// how many of them still have a record.
	made, records int
}

func (r *run) logf(format string, a ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, time.Now().Format("15:04:05 ")+format+"\n", a...)
	}
}

func (r *run) start(id string, hollow bool) (*nodeProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &nodeProc{id: id, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: filepath.Join(r.dir, id)}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, err
	}
	ln := launch.Node{ID: id, Listen: p.addr, DataDir: filepath.Join(p.dir, "data"),
		EtcdEndpoints: []string{"http://" + r.etcd.Endpoint()},
		LeaseTTL:      r.cfg.LeaseTTL, NodeTTL: r.cfg.NodeTTL, LogLevel: "warn"}
	if hollow {
		ln.Extra = []string{"--runtime", node.RuntimeHollow, "--hollow-latency", r.cfg.HollowLatency.String()}
	} else {
		dport, err := freePort()
		if err != nil {
			return nil, err
		}
		p.debug = fmt.Sprintf("127.0.0.1:%d", dport)
		ln.DebugListen = p.debug
	}
	if p.p, err = launch.Start(launch.Process{Binary: r.cfg.Binary, Log: filepath.Join(p.dir, "node.log")}, ln); err != nil {
		return nil, err
	}
	if p.conn, err = grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *nodeProc) client() shoalv1.ShoalClient { return shoalv1.NewShoalClient(p.conn) }

// serving waits until the node answers.
func (p *nodeProc) serving(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := p.client().ListProviders(cctx, &shoalv1.ListProvidersRequest{PageSize: 1})
		cancel()
		if err == nil {
			return nil
		}
		if p.p.Exited() {
			return fmt.Errorf("node %s exited at start (%v); see %s", p.id, p.p.Err(), filepath.Join(p.dir, "node.log"))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not serve within %s: %w", p.id, within, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill SIGKILLs the node and waits for it.
func (p *nodeProc) kill() { p.p.Kill() }

// liveHeap collects the node's garbage and returns its heap in use, from
// its pprof endpoint; with dir set it saves the heap profile there as
// heap-RECORDS.pb.gz.
func (p *nodeProc) liveHeap(ctx context.Context, dir string, records int) (int64, error) {
	get := func(query string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.debug+"/debug/pprof/heap?"+query, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("node %s heap profile: %w", p.id, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("node %s heap profile: %s", p.id, resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	text, err := get("gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	// The text form ends with the runtime's MemStats ("# HeapInuse = N").
	var inuse int64 = -1
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			if inuse, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return 0, fmt.Errorf("node %s heap profile: HeapInuse %q: %w", p.id, v, err)
			}
		}
	}
	if inuse < 0 {
		return 0, fmt.Errorf("node %s heap profile: no HeapInuse line", p.id)
	}
	if dir != "" {
		prof, err := get("")
		if err != nil {
			return 0, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", records)), prof, 0o644); err != nil {
			return 0, err
		}
	}
	return inuse, nil
}

func (p *nodeProc) rss() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p.p.Pid()))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, errors.New("statm: short")
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()), err
}

func (r *run) close() {
	var wg sync.WaitGroup
	for _, p := range slices.Concat(r.real, r.hollow) {
		wg.Go(func() {
			p.p.Terminate(30 * time.Second)
			p.conn.Close()
		})
	}
	wg.Wait()
	if r.raw != nil {
		r.raw.Close()
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
	if !r.cfg.KeepData {
		os.RemoveAll(r.dir)
	}
}

// Run carries out a scale run and returns its report (also written to
// ReportDir).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shoal-scale-")
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, dir: dir}
	defer r.close()
	rep := &Report{Started: time.Now()}
	rep.Config.RealNodes, rep.Config.HollowNodes, rep.Config.SandboxesPerNode, rep.Config.Clients =
		cfg.RealNodes, cfg.HollowNodes, cfg.SandboxesPerNode, cfg.Clients
	rep.Config.Growth = cfg.Growth
	rep.Config.NodeTTL, rep.Config.LeaseTTL, rep.Config.HollowLatency = cfg.NodeTTL, cfg.LeaseTTL, cfg.HollowLatency
	rep, err = r.measure(ctx, rep)
	switch {
	case err != nil && ctx.Err() != nil:
		return rep, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	case err != nil:
		// The nodes' logs say why: keep them.
		r.cfg.KeepData = true
		return rep, fmt.Errorf("%w (the run's etcd data and node logs are kept in %s)", err, dir)
	}
	return rep, rep.write(cfg.ReportDir)
}

// measure starts the fleet and takes the figures.
func (r *run) measure(ctx context.Context, rep *Report) (*Report, error) {
	cfg := r.cfg
	var err error

	cp, err1 := freePort()
	pp, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	ec := embedetcd.DefaultConfig(filepath.Join(r.dir, "etcd"))
	ec.Name = "scale"
	ec.ListenClient, ec.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	ec.UnsafeNoFsync = true // measures shoal, not the disk
	if r.etcd, err = embedetcd.Start(ec); err != nil {
		return nil, err
	}
	if r.raw, err = r.etcd.Client(); err != nil {
		return nil, err
	}
	r.st = store.New(r.raw, store.Options{})

	t0 := time.Now()
	r.logf("starting %d real nodes and %d hollow nodes on one etcd", cfg.RealNodes, cfg.HollowNodes)
	for i := range cfg.RealNodes {
		p, err := r.start(fmt.Sprintf("real-%d", i), false)
		if err != nil {
			return nil, err
		}
		r.real = append(r.real, p)
		// One by one: the first to serve leads, the others queue behind it.
		if err := p.serving(ctx, time.Minute); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.HollowNodes; i += 10 {
		var batch []*nodeProc
		for j := i; j < min(i+10, cfg.HollowNodes); j++ {
			p, err := r.start(fmt.Sprintf("hollow-%03d", j), true)
			if err != nil {
				return nil, err
			}
			r.hollow = append(r.hollow, p)
			batch = append(batch, p)
		}
		for _, p := range batch {
			if err := p.serving(ctx, 2*time.Minute); err != nil {
				return nil, err
			}
		}
	}
	rep.StartNodes = time.Since(t0)
	r.logf("all %d nodes serving in %s", len(r.real)+len(r.hollow), rep.StartNodes.Round(time.Millisecond))
	if r.api, err = r.follower(ctx); err != nil {
		return rep, err
	}
	r.logf("figures through %s (not the leader)", r.api.id)

	// Every real node's empty figures: the leader may move to the API
	// node under load, and the figures then go through another.
	for _, p := range r.real {
		dir := ""
		if p == r.api {
			dir = r.cfg.ReportDir
		}
		if p.baseRSS, err = p.rss(); err != nil {
			return rep, err
		}
		if p.baseHeap, err = p.liveHeap(ctx, dir, 0); err != nil {
			return rep, err
		}
	}
	rep.BaseRSS, rep.BaseLiveHeap = r.api.baseRSS, r.api.baseHeap
	if err := r.create(ctx, rep); err != nil {
		return rep, err
	}
	if err := r.killHollow(ctx, rep); err != nil {
		return rep, err
	}
	if err := r.killLeader(ctx, rep); err != nil {
		return rep, err
	}
	if err := r.grow(ctx, rep); err != nil {
		return rep, err
	}
	rep.Finished = time.Now()
	return rep, nil
}

// follower is a real node that does not lead.
func (r *run) follower(ctx context.Context) (*nodeProc, error) {
	t, ok, err := lease.Current(ctx, r.raw, r.st.LeaderPrefix(), r.st.LeaderTermKey())
	if err != nil || !ok {
		return nil, fmt.Errorf("no leader among the real nodes (%v)", err)
	}
	for _, p := range r.real {
		if p.id != t.Node {
			return p, nil
		}
	}
	return nil, fmt.Errorf("every real node is the leader %s", t.Node)
}

// point measures the growth curve at the current record count, lat being
// the latencies of the creates just before it.
func (r *run) point(ctx context.Context, rep *Report, lat []time.Duration) error {
	p := Point{Records: r.records, CreateP99: pctl(lat, 0.99), CreateSamples: len(lat),
		Node: r.api.id, BaseRSSBytes: r.api.baseRSS, BaseLiveHeapBytes: r.api.baseHeap}
	var err error
	if p.ListP99, p.ListSamples, err = r.listP99(ctx, r.records); err != nil {
		return err
	}
	if p.RSSBytes, err = r.api.rss(); err != nil {
		return err
	}
	if p.LiveHeapBytes, err = r.api.liveHeap(ctx, r.cfg.ReportDir, r.records); err != nil {
		return err
	}
	rep.Growth = append(rep.Growth, p)
	r.logf("%d records: create p99 %s (%d creates), list p99 %s (%d lists), API node %s RSS %d MiB", p.Records, p.CreateP99.Round(time.Microsecond),
		p.CreateSamples, p.ListP99.Round(time.Microsecond), p.ListSamples, p.Node, p.RSSBytes>>20)
	return nil
}

// grow measures the growth points above the fleet: more sandboxes on the
// live hollow nodes (the killed one is NotReady, so placement skips it).
func (r *run) grow(ctx context.Context, rep *Report) error {
	fleet := r.cfg.HollowNodes * r.cfg.SandboxesPerNode
	points := slices.DeleteFunc(slices.Clone(r.cfg.Growth), func(g int) bool { return g <= fleet })
	slices.Sort(points)
	for _, pt := range slices.Compact(points) {
		n := pt - r.records
		tail := max(1, n/10)
		lat, _, err := r.createRange(ctx, r.made, r.made+n, r.made+n-tail)
		if err != nil {
			return err
		}
		r.made += n
		r.records += n
		if err := r.point(ctx, rep, lat); err != nil {
			return err
		}
	}
	return nil
}

// create makes every sandbox through the real nodes, measuring the growth
// curve on the way, and waits until all are READY.
func (r *run) create(ctx context.Context, rep *Report) error {
	total := r.cfg.HollowNodes * r.cfg.SandboxesPerNode
	points := slices.DeleteFunc(slices.Clone(r.cfg.Growth), func(g int) bool { return g >= total })
	slices.Sort(points)
	points = append(slices.Compact(points), total)
	t0 := time.Now()
	var createTime time.Duration
	for _, pt := range points {
		tail := max(1, (pt-r.made)/10) // the creates whose latencies count for the point
		lat, d, err := r.createRange(ctx, r.made, pt, pt-tail)
		if err != nil {
			return err
		}
		createTime += d
		r.made, r.records = pt, pt
		if err := r.point(ctx, rep, lat); err != nil {
			return err
		}
	}
	rep.Creates = total
	rep.CreatesPerSecond = float64(total) / createTime.Seconds()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		ready, err := r.countPhase(ctx, shoalv1.SandboxPhase_READY, "")
		if err != nil {
			return err
		}
		if ready == total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d sandboxes READY after 10 minutes", ready, total)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rep.AllReady = time.Since(t0)
	r.logf("%d sandboxes READY %s after the first create (%.0f creates/s)", total, rep.AllReady.Round(time.Millisecond), rep.CreatesPerSecond)
	return nil
}

// refusedRetry spaces the rounds of a create every live node refused
// (their leases renew within a TTL).
var refusedRetry = backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second}

// createRange creates sandboxes [from, to) with the configured clients and
// returns the latencies of those from measureFrom on, and the time taken.
func (r *run) createRange(ctx context.Context, from, to, measureFrom int) ([]time.Duration, time.Duration, error) {
	next := make(chan int)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	live := slices.DeleteFunc(slices.Clone(r.real), func(p *nodeProc) bool { return p.p.Exited() })
	// A refusal that did nothing means a node lost its lease: the machine,
	// carrying every node, is overloaded. Every client then holds its next
	// create for one node TTL (resumeAt), so the nodes can renew, instead
	// of feeding a spiral of lapsed leases, UNKNOWN marks and rewrites.
	var resumeAt, refused atomic.Int64
	hold := func() {
		if d := time.Until(time.Unix(0, resumeAt.Load())); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
	for k := range r.cfg.Clients {
		wg.Go(func() {
			for i := range next {
				hold()
				s := time.Now()
				var err error
				// A node that refuses having done nothing (it lost its
				// lease on the loaded machine) is left for the next one,
				// as a client does, and after a round of them all the
				// client waits a moment (their leases renew within a
				// TTL); the time counts. Given up after a minute.
				giveUp := time.Now().Add(time.Minute)
				for attempt := 0; ; attempt++ {
					c := live[(k+attempt)%len(live)].client()
					_, err = c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
						Meta: &shoalv1.ObjectMeta{Name: fmt.Sprintf("s%06d", i)},
						Spec: &shoalv1.SandboxSpec{NodeSelector: map[string]string{node.RuntimeLabel: node.RuntimeHollow}}}})
					if err == nil || !shoal.IsNotApplied(err) || time.Now().After(giveUp) {
						break
					}
					refused.Add(1)
					resumeAt.Store(time.Now().Add(r.cfg.NodeTTL).UnixNano())
					if (attempt+1)%len(live) == 0 {
						_ = backoff.Sleep(ctx, refusedRetry.Delay((attempt+1)/len(live)-1))
					}
				}
				d := time.Since(s)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("create s%06d: %w", i, err)
				}
				if i >= measureFrom {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		})
	}
	for i := from; i < to; i++ {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if n := refused.Load(); n > 0 {
		r.logf("creates s%06d to s%06d: %d refusals by nodes that had lost their lease (the machine is overloaded); creates were held a node TTL after each", from, to-1, n)
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, time.Since(t0), firstErr
}

// listP99 lists every sandbox through the API node in pages of 500, ten
// times (three at 50,000 and above), and returns the p99.
func (r *run) listP99(ctx context.Context, want int) (time.Duration, int, error) {
	n := 10
	if want >= 50000 {
		n = 3
	}
	var lat []time.Duration
	c := r.api.client()
	for range n {
		t0 := time.Now()
		got, token := 0, ""
		for {
			page, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 500, PageToken: token})
			if err != nil {
				return 0, 0, err
			}
			got += len(page.Items)
			if token = page.NextPageToken; token == "" {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		if got != want {
			return 0, 0, fmt.Errorf("a list returned %d sandboxes, want %d", got, want)
		}
	}
	return pctl(lat, 0.99), n, nil
}

// countPhase counts the sandboxes in phase (of node, if set), reading the
// store directly.
func (r *run) countPhase(ctx context.Context, phase shoalv1.SandboxPhase, node string) (int, error) {
	n := 0
	o := store.ListOptions{Limit: 5000}
	for {
		page, err := r.st.ListSandboxes(ctx, "", o, func(sb *shoalv1.Sandbox) bool {
			return sb.GetStatus().GetPhase() == phase && (node == "" || store.NodeOf(sb) == node)
		})
		if err != nil {
			return 0, err
		}
		n += len(page.Items)
		if page.Next == nil {
			return n, nil
		}
		o = *page.Next
	}
}

// killHollow SIGKILLs the first hollow node and times until every one of
// its sandboxes is UNKNOWN.
func (r *run) killHollow(ctx context.Context, rep *Report) error {
	victim := r.hollow[0]
	mine, err := r.countPhase(ctx, shoalv1.SandboxPhase_READY, victim.id)
	if err != nil {
		return err
	}
	t0 := time.Now()
	victim.kill()
	deadline := t0.Add(r.cfg.NodeTTL + 2*time.Minute)
	for {
		unknown, err := r.countPhase(ctx, shoalv1.SandboxPhase_UNKNOWN, victim.id)
		if err != nil {
			return err
		}
		if unknown == mine {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hollow node %s killed: %d of its %d sandboxes UNKNOWN after %s", victim.id, unknown, mine, time.Since(t0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	rep.HollowKill, rep.HollowKillCount = time.Since(t0), mine
	r.logf("hollow node %s SIGKILLed: its %d sandboxes UNKNOWN in %s (node TTL %s)", victim.id, mine, rep.HollowKill.Round(time.Millisecond), r.cfg.NodeTTL)
	return nil
}

// killLeader SIGKILLs the leader (a real node) and, through another real
// node, deletes a sandbox of a live hollow node at once: it times until the
// new leader records its term and until that sandbox's record is gone (its
// owner tears it down; the new leader's fenced Txn removes it).
func (r *run) killLeader(ctx context.Context, rep *Report) error {
	t, ok, err := lease.Current(ctx, r.raw, r.st.LeaderPrefix(), r.st.LeaderTermKey())
	if err != nil || !ok {
		return fmt.Errorf("no leader to kill (%v)", err)
	}
	var leader *nodeProc
	for _, p := range r.real {
		if p.id == t.Node {
			leader = p
		}
	}
	switch {
	case leader == nil:
		return fmt.Errorf("the leader is %s, not a real node", t.Node)
	case leader == r.api:
		// The leader moved (a lease lapsed on the loaded machine) to
		// the node the figures went through: they go through another
		// from now on, each point with its own node's empty figures.
		var next *nodeProc
		for _, p := range r.real {
			if p != leader && !p.p.Exited() {
				next = p
				break
			}
		}
		if next == nil {
			return fmt.Errorf("the leader moved to %s, the node the figures go through, and no other real node is left", t.Node)
		}
		r.logf("the leader moved to %s, the node the figures went through: they go through %s from now on", leader.id, next.id)
		r.api = next
	}
	other := r.api
	// A READY sandbox of a live hollow node: its owner tears it down at
	// once, so its removal waits only for the new leader.
	page, err := r.st.ListSandboxes(ctx, "", store.ListOptions{Limit: 1}, func(sb *shoalv1.Sandbox) bool {
		return store.NodeOf(sb) != r.hollow[0].id && sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_READY
	})
	if err != nil {
		return err
	}
	if len(page.Items) == 0 {
		return errors.New("no READY sandbox on a live hollow node to delete at the leader's kill")
	}
	victim := page.Items[0].Meta.Name
	t0 := time.Now()
	leader.kill()
	if _, err := other.client().DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: victim}); err != nil {
		return fmt.Errorf("delete %s after the leader's kill: %w", victim, err)
	}
	r.records--
	deadline := t0.Add(r.cfg.LeaseTTL + 2*time.Minute)
	for rep.LeaderTerm == 0 || rep.LeaderSynced == 0 || rep.LeaderRemoval == 0 {
		if rep.LeaderTerm == 0 || rep.LeaderSynced == 0 {
			if nt, ok, err := lease.Current(ctx, r.raw, r.st.LeaderPrefix(), r.st.LeaderTermKey()); err == nil && ok && nt.Node != t.Node {
				if rep.LeaderTerm == 0 && !nt.Since.IsZero() {
					rep.LeaderTerm = time.Since(t0)
				}
				if !nt.Synced.IsZero() {
					// The record's own time (this machine's clock): when
					// the leader was caught up, not when this poll saw it.
					rep.LeaderSynced = max(nt.Synced.Sub(t0), time.Millisecond)
				}
			}
		}
		if rep.LeaderRemoval == 0 {
			if _, err := r.st.GetSandbox(ctx, store.DefaultWorkspace, victim); err != nil {
				rep.LeaderRemoval = time.Since(t0)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leader %s killed: term recorded after %s, resync done after %s, %s removed after %s (0: not yet)", t.Node, rep.LeaderTerm, rep.LeaderSynced, victim, rep.LeaderRemoval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.logf("leader %s SIGKILLed: new term recorded in %s, its first resync done in %s, first fenced removal (%s) in %s (lease TTL %s)", t.Node,
		rep.LeaderTerm.Round(time.Millisecond), rep.LeaderSynced.Round(time.Millisecond), victim, rep.LeaderRemoval.Round(time.Millisecond), r.cfg.LeaseTTL)
	return nil
}

// perRecordKiB is the API node's RSS above its empty start, per record.
func (rep *Report) perRecordKiB(p Point) float64 {
	return float64(p.RSSBytes-p.BaseRSSBytes) / 1024 / float64(p.Records)
}

// heapPerRecordKiB is the same for its live heap.
func (rep *Report) heapPerRecordKiB(p Point) float64 {
	return float64(p.LiveHeapBytes-p.BaseLiveHeapBytes) / 1024 / float64(p.Records)
}

func pctl(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// write saves report.json, summary.txt and growth.png in dir.
func (rep *Report) write(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	var sum strings.Builder
	rep.WriteSummary(&sum)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sum.String()), 0o644); err != nil {
		return err
	}
	return rep.plot(filepath.Join(dir, "growth.png"))
}

// WriteSummary prints the figures.
func (rep *Report) WriteSummary(w io.Writer) {
	c := rep.Config
	fmt.Fprintf(w, "fleet: %d real nodes, %d hollow nodes × %d sandboxes, %d clients, node TTL %s, lease TTL %s, hollow latency %s\n",
		c.RealNodes, c.HollowNodes, c.SandboxesPerNode, c.Clients, c.NodeTTL, c.LeaseTTL, c.HollowLatency)
	fmt.Fprintf(w, "nodes serving after %s; %d creates at %.0f/s; all READY %s after the first\n\n",
		rep.StartNodes.Round(time.Millisecond), rep.Creates, rep.CreatesPerSecond, rep.AllReady.Round(time.Millisecond))
	fmt.Fprintf(w, "API node with no sandbox: RSS %d MiB, live heap %d MiB\n", rep.BaseRSS>>20, rep.BaseLiveHeap>>20)
	fmt.Fprintf(w, "%-10s %14s %9s %14s %12s %22s %14s %22s  %s\n", "records", "create p99", "(creates)", "list p99", "RSS MiB", "above empty, KiB/rec", "live heap MiB", "above empty, KiB/rec", "node")
	for _, p := range rep.Growth {
		fmt.Fprintf(w, "%-10d %14s %9d %14s %12d %22.2f %14d %22.2f  %s\n", p.Records, p.CreateP99.Round(time.Microsecond), p.CreateSamples,
			p.ListP99.Round(time.Microsecond), p.RSSBytes>>20, rep.perRecordKiB(p), p.LiveHeapBytes>>20, rep.heapPerRecordKiB(p), p.Node)
	}
	fmt.Fprintf(w, "\nhollow node SIGKILL → its %d sandboxes UNKNOWN: %s\n", rep.HollowKillCount, rep.HollowKill.Round(time.Millisecond))
	fmt.Fprintf(w, "leader SIGKILL → new term recorded: %s; → its first resync done: %s; → first fenced removal: %s\n",
		rep.LeaderTerm.Round(time.Millisecond), rep.LeaderSynced.Round(time.Millisecond), rep.LeaderRemoval.Round(time.Millisecond))
}
