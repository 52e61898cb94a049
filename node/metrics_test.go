package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/metrics"
	"shoal/node"
)

// scrape reads a node's /metrics with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// value is the sum of a family's samples whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	total := 0.0
	for _, m := range f.Metric {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// The counters move as calls are made: API calls by method and code, the
// update loop's attempts and the conflicts it absorbed under concurrent
// label writers, a provisioning, lease renewals; the state gauges say what
// is (a READY sandbox on this node, this node leads and holds its lease);
// /healthz and /readyz answer.
func TestMetricsMoveWithCalls(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.MetricsListen = addr
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	for _, path := range []string{"/healthz", "/readyz"} {
		testenv.Eventually(t, 30*time.Second, path+" answers 200", func() (bool, error) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return false, err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200, fmt.Errorf("%d %s", resp.StatusCode, body)
		})
	}
	before := scrape(t, addr)
	if _, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "m"}}}); err != nil {
		t.Fatal(err)
	}
	// Concurrent label writers on one sandbox until the loop has absorbed
	// conflicts.
	conflicts := func() float64 {
		return value(scrape(t, addr), "shoal_update_conflicts_total", map[string]string{"kind": "sandbox"})
	}
	testenv.Eventually(t, time.Minute, "the update loop counts conflicts", func() (bool, error) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				_, _ = n.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "m", SetLabels: map[string]string{"w": fmt.Sprint(w)}})
			})
		}
		wg.Wait()
		return conflicts() > 0, nil
	})
	if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "nope"}); err == nil {
		t.Fatal("get of a missing sandbox")
	}
	after := scrape(t, addr)
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"shoal_api_requests_total", map[string]string{"method": "/shoal.v1.Shoal/CreateSandbox", "code": "OK"}, 1},
		{"shoal_api_requests_total", map[string]string{"method": "/shoal.v1.Shoal/UpdateSandbox", "code": "OK"}, 8},
		{"shoal_api_requests_total", map[string]string{"method": "/shoal.v1.Shoal/GetSandbox", "code": "NotFound"}, 1},
		{"shoal_api_request_duration_seconds", map[string]string{"method": "/shoal.v1.Shoal/CreateSandbox"}, 1},
		{"shoal_update_attempts_total", map[string]string{"kind": "sandbox"}, 9},
		{"shoal_provision_duration_seconds", nil, 1},
	} {
		grew := value(after, c.name, c.labels) - max(0, value(before, c.name, c.labels))
		if grew < c.min {
			t.Errorf("%s%v grew by %v, want at least %v", c.name, c.labels, grew, c.min)
		}
	}
	// Every consistent read from the cache is a round trip to etcd: the
	// histogram counts each of 20 gets, not only the lease renewals.
	rtt0 := value(scrape(t, addr), "shoal_etcd_round_trip_seconds", nil)
	for range 20 {
		if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if grew := value(scrape(t, addr), "shoal_etcd_round_trip_seconds", nil) - rtt0; grew < 20 {
		t.Errorf("shoal_etcd_round_trip_seconds counted %v round trips for 20 gets through the cache", grew)
	}
	testenv.Eventually(t, 30*time.Second, "lease renewals counted", func() (bool, error) {
		return value(scrape(t, addr), "shoal_node_lease_renewals_total", map[string]string{"result": "ok"}) > 0, nil
	})
	// The create's events (Scheduled, Created, Started) are written, and
	// nothing was dropped; every drop reason has its series from the start.
	testenv.Eventually(t, 30*time.Second, "the create's events written", func() (bool, error) {
		return value(scrape(t, addr), "shoal_events_written_total", nil) >= 3, nil
	})
	evm := scrape(t, addr)
	for _, r := range metrics.EventDropReasons {
		if v := value(evm, "shoal_events_dropped_total", map[string]string{"reason": r}); v != 0 {
			t.Errorf("shoal_events_dropped_total{reason=%q} = %v, want 0", r, v)
		}
	}
	if v := value(evm, "shoal_events_queued", nil); v < 0 {
		t.Error("no shoal_events_queued gauge")
	}
	for _, g := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shoal_sandboxes", map[string]string{"phase": "READY", "node": cfg.ID}, 1},
		{"shoal_leader", nil, 1},
		{"shoal_node_lease_held", nil, 1},
		{"shoal_providers", nil, 0},
	} {
		if got := value(after, g.name, g.labels); got != g.want {
			t.Errorf("%s%v = %v, want %v", g.name, g.labels, got, g.want)
		}
	}
	// A delete is a teardown on the owner; this node began one term.
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "m", Wait: true}); err != nil {
		t.Fatal(err)
	}
	last := scrape(t, addr)
	if grew := value(last, "shoal_teardown_duration_seconds", nil) - value(after, "shoal_teardown_duration_seconds", nil); grew < 1 {
		t.Errorf("shoal_teardown_duration_seconds grew by %v after a delete", grew)
	}
	if v := value(last, "shoal_leader_terms_total", nil); v != 1 {
		t.Errorf("shoal_leader_terms_total = %v, want 1", v)
	}
	if v := value(last, "shoal_sandboxes", map[string]string{"node": cfg.ID}); v > 0 {
		t.Errorf("shoal_sandboxes on %s = %v after the delete, want none", cfg.ID, v)
	}
	if !strings.HasPrefix(fmt.Sprint(after["go_goroutines"].GetType()), "GAUGE") {
		t.Errorf("Go runtime metrics missing")
	}

	if value(after, "shoal_watch_cache_lag_revisions", nil) < 0 {
		t.Error("no watch cache lag gauge")
	}
	// The Grafana dashboard plots only metrics a node exposes.
	dash, err := os.ReadFile("../deploy/grafana/shoal.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(dash) {
		t.Fatal("deploy/grafana/shoal.json is not JSON")
	}
	names := regexp.MustCompile(`\b(shoal_[a-z_]+|go_[a-z_]+|process_[a-z_]+)\b`).FindAllString(string(dash), -1)
	if len(names) < 20 {
		t.Fatalf("the dashboard names %d metrics", len(names))
	}
	for _, name := range names {
		family := strings.TrimSuffix(name, "_bucket")
		if after[family] == nil {
			t.Errorf("the dashboard plots %s, which the node does not expose", name)
		}
	}
}

// Every listener opens before the node registers: a start whose
// --metrics-listen address is taken fails naming the flag, and the node
// never appears in the registry (it used to register first and return
// with its liveness keepalive still running).
func TestTakenMetricsAddressFailsBeforeRegistering(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	voter := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	wcfg := testenv.NodeConfig(t)
	wcfg.Runtime = node.RuntimeHollow
	wcfg.EtcdEndpoints = []string{voter.EtcdEndpoint()}
	wcfg.MetricsListen = taken.Addr().String()
	w, err := node.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "--metrics-listen "+taken.Addr().String()) {
		t.Fatalf("start with a taken --metrics-listen: %v, want an error naming it", err)
	}
	if _, err := voter.Store().GetNode(ctx, wcfg.ID); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("the failed node is in the registry: %v", err)
	}
}

// /readyz says 503, with the reason, once the node's etcd is gone (a
// worker whose voter stopped), while /healthz still answers: the process
// lives, but nothing should be sent to it.
func TestReadyzWhenEtcdIsGone(t *testing.T) {
	t.Parallel()
	vcfg := testenv.NodeConfig(t)
	vcfg.Runtime = node.RuntimeHollow
	voter := testenv.StartNode(t, vcfg)
	wcfg := testenv.NodeConfig(t)
	wcfg.ID += "-w"
	wcfg.Runtime = node.RuntimeHollow
	wcfg.EtcdEndpoints = []string{voter.EtcdEndpoint()}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	wcfg.MetricsListen = addr
	testenv.StartNode(t, wcfg)
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	testenv.Eventually(t, 30*time.Second, "the worker is ready", func() (bool, error) {
		code, body, err := get("/readyz")
		return code == 200, fmt.Errorf("%d %s %v", code, body, err)
	})
	voter.Stop()
	testenv.Eventually(t, time.Minute, "/readyz 503 without etcd", func() (bool, error) {
		code, body, err := get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "not ready: ") &&
			(strings.Contains(body, "etcd") || strings.Contains(body, "liveness lease")), fmt.Errorf("%d %s %v", code, body, err)
	})
	if code, _, err := get("/healthz"); code != 200 {
		t.Fatalf("/healthz without etcd: %d %v", code, err)
	}
}

// A node without the watch cache (--watch-cache=false) serves the same
// API from etcd: create, get, list, update and delete work; the cache's
// metrics and the gauges read from it are absent, not zero.
func TestNodeWithoutWatchCache(t *testing.T) {
	t.Parallel()
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	cfg.WatchCache = false
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.MetricsListen = addr
	n := testenv.StartNode(t, cfg)
	if n.Store().Cache() != nil {
		t.Fatal("a watch cache with WatchCache false")
	}
	ctx := ctxT(t, 2*time.Minute)
	for _, name := range []string{"a", "b"} {
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}})
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY || sb.Spec.Node != cfg.ID {
			t.Fatalf("create %s: %v %v", name, sb, err)
		}
	}
	if _, err := n.Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "a", SetLabels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	got, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "a"})
	if err != nil || got.Meta.Labels["k"] != "v" {
		t.Fatalf("get after update: %v %v", got, err)
	}
	list, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{LabelSelector: "k=v"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Meta.Name != "a" {
		t.Fatalf("list k=v: %v %v", list, err)
	}
	if _, err := n.Client.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "b", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if nodes, err := n.Store().Nodes(ctx); err != nil || len(nodes) != 1 || nodes[0].Status.Sandboxes != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	fams := scrape(t, addr)
	for _, name := range []string{"shoal_sandboxes", "shoal_providers", "shoal_watch_cache_reads_served_total", "shoal_watch_cache_lag_revisions"} {
		if fams[name] != nil {
			t.Errorf("%s is exposed without a watch cache", name)
		}
	}
	if value(fams, "shoal_api_requests_total", map[string]string{"method": "/shoal.v1.Shoal/CreateSandbox", "code": "OK"}) != 2 {
		t.Error("API calls not counted without a watch cache")
	}
}
