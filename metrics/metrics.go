package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one node's metrics.
type Metrics struct {
	reg *prometheus.Registry

	apiRequests      *prometheus.CounterVec
	apiDuration      *prometheus.HistogramVec
	updateAttempts   *prometheus.CounterVec
	updateConflicts  *prometheus.CounterVec
	identicalRetries *prometheus.CounterVec
	fencedRejections prometheus.Counter
	leaseRenewals    *prometheus.CounterVec
	etcdRTT          prometheus.Histogram
	teardown         prometheus.Histogram
	provision        prometheus.Histogram
	orphansReaped    prometheus.Counter
	eventsWritten    prometheus.Counter
	eventsDropped    *prometheus.CounterVec
	egressConns      *prometheus.CounterVec

	egressMu        sync.Mutex
	egressSandboxes map[string]bool // the sandbox label values in use
}

// New makes the registry with shoal's metrics and Go's process metrics.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_api_requests_total",
		Help: "API calls served, by gRPC method and status code."}, []string{"method", "code"})
	m.apiDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shoal_api_request_duration_seconds",
		Help: "API call latency by method (streams: their whole life).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"method"})
	m.updateAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_update_attempts_total",
		Help: "Transactions the update loop sent, by object kind."}, []string{"kind"})
	m.updateConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_update_conflicts_total",
		Help: "Update loop transactions that lost a compare and were retried from the fresh state, by kind."}, []string{"kind"})
	m.identicalRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_update_identical_byte_commits_total",
		Help: "Updates committed by the same-bytes fallback over an identical rewrite of the record, by kind."}, []string{"kind"})
	m.fencedRejections = prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_fenced_rejections_total",
		Help: "Leader-only writes refused because this node's leadership (fence) was gone."})
	m.leaseRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_node_lease_renewals_total",
		Help: "Renewals of this node's liveness lease, by result (ok, failed)."}, []string{"result"})
	m.etcdRTT = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shoal_etcd_round_trip_seconds",
		Help: "Round trip to etcd of this node's lease renewals and of its watch cache's linearizable revision reads (one per consistent read).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.teardown = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shoal_teardown_duration_seconds",
		Help: "Removing a deleted sandbox's container and recording it, on its owner.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})
	m.provision = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shoal_provision_duration_seconds",
		Help: "Creating and starting a sandbox's container, on its owner.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})
	m.orphansReaped = prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_orphans_reaped_total",
		Help: "Labelled containers without a record that this node removed."})
	m.eventsWritten = prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_events_written_total",
		Help: "Sandbox events this node wrote to etcd (a coalesced repeat rewrites its event and counts again)."})
	m.egressConns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_egress_connections_total",
		Help: "Connections the node's egress proxy decided, by decision (admit, refuse, audit, failed) and sandbox (workspace/name; the first MaxEgressSandboxLabels sandboxes a process sees, then \"other\")."},
		[]string{"decision", "sandbox"})
	m.egressSandboxes = map[string]bool{}
	m.eventsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_events_dropped_total",
		Help: "Sandbox events this node recorded but did not write, by reason: queue_full, rate_limited, refused (etcd refused the write), expired (older than --event-ttl before it could be written), shutdown."}, []string{"reason"})
	m.reg.MustRegister(m.apiRequests, m.apiDuration, m.updateAttempts, m.updateConflicts, m.identicalRetries,
		m.fencedRejections, m.leaseRenewals, m.etcdRTT, m.teardown, m.provision, m.orphansReaped, m.eventsWritten, m.eventsDropped, m.egressConns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The known label values start at zero, so that every series exists
	// (and a rate over it is defined) before its first event.
	for _, kind := range []string{"sandbox", "provider"} {
		m.updateAttempts.WithLabelValues(kind)
		m.updateConflicts.WithLabelValues(kind)
		m.identicalRetries.WithLabelValues(kind)
	}
	for _, r := range []string{"ok", "failed"} {
		m.leaseRenewals.WithLabelValues(r)
	}
	for _, r := range EventDropReasons {
		m.eventsDropped.WithLabelValues(r)
	}
	return m
}

// Registry is the node's registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// APIRequest records a finished API call.
func (m *Metrics) APIRequest(method, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.apiRequests.WithLabelValues(method, code).Inc()
	m.apiDuration.WithLabelValues(method).Observe(d.Seconds())
}

// UpdateAttempt records one Txn of the update loop: conflict if it lost a
// compare, identical if it committed through the same-bytes fallback.
func (m *Metrics) UpdateAttempt(kind string, conflict, identical bool) {
	if m == nil {
		return
	}
	m.updateAttempts.WithLabelValues(kind).Inc()
	if conflict {
		m.updateConflicts.WithLabelValues(kind).Inc()
	}
	if identical {
		m.identicalRetries.WithLabelValues(kind).Inc()
	}
}

// FencedRejection records a leader-only write refused for a lost fence.
func (m *Metrics) FencedRejection() {
	if m != nil {
		m.fencedRejections.Inc()
	}
}

// LeaseRenewal records one renewal of the node's liveness lease.
func (m *Metrics) LeaseRenewal(ok bool, rtt time.Duration) {
	if m == nil {
		return
	}
	if ok {
		m.leaseRenewals.WithLabelValues("ok").Inc()
		m.EtcdRoundTrip(rtt)
	} else {
		m.leaseRenewals.WithLabelValues("failed").Inc()
	}
}

// EtcdRoundTrip records one round trip to etcd of a request that does
// nothing else (a lease renewal, the watch cache's read of the revision).
func (m *Metrics) EtcdRoundTrip(d time.Duration) {
	if m != nil {
		m.etcdRTT.Observe(d.Seconds())
	}
}

// Teardown and Provision record how long the agent's steps took.
func (m *Metrics) Teardown(d time.Duration) {
	if m != nil {
		m.teardown.Observe(d.Seconds())
	}
}

func (m *Metrics) Provision(d time.Duration) {
	if m != nil {
		m.provision.Observe(d.Seconds())
	}
}

// OrphanReaped records one reaped container.
func (m *Metrics) OrphanReaped() {
	if m != nil {
		m.orphansReaped.Inc()
	}
}

// MaxEgressSandboxLabels bounds the sandbox label's values of
// shoal_egress_connections_total: the series of later sandboxes are
// counted under "other".
const MaxEgressSandboxLabels = 256

// EgressConnection counts one decision of the egress proxy for a sandbox
// (workspace/name).
func (m *Metrics) EgressConnection(decision, sandbox string) {
	if m == nil {
		return
	}
	m.egressMu.Lock()
	if !m.egressSandboxes[sandbox] {
		if len(m.egressSandboxes) >= MaxEgressSandboxLabels {
			sandbox = "other"
		} else {
			m.egressSandboxes[sandbox] = true
		}
	}
	m.egressMu.Unlock()
	m.egressConns.WithLabelValues(decision, sandbox).Inc()
}

// EventDropReasons are the reason label values of
// shoal_events_dropped_total (package events says when each applies).
var EventDropReasons = []string{"queue_full", "rate_limited", "refused", "expired", "shutdown"}

// EventsWritten records n sandbox events written to etcd.
func (m *Metrics) EventsWritten(n int) {
	if m != nil {
		m.eventsWritten.Add(float64(n))
	}
}

// EventsDropped records n sandbox events dropped for reason (one of
// EventDropReasons).
func (m *Metrics) EventsDropped(reason string, n int) {
	if m != nil {
		m.eventsDropped.WithLabelValues(reason).Add(float64(n))
	}
}

// Gauge registers a value read at scrape time.
func (m *Metrics) Gauge(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter read at scrape time.
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// Labelled registers a gauge with labels, read at scrape time: f returns
// each label set's value.
func (m *Metrics) Labelled(name, help string, labels []string, f func() map[[2]string]float64) {
	m.reg.MustRegister(&labelledGauge{desc: prometheus.NewDesc(name, help, labels, nil), f: f})
}

// LabelledCounter registers a counter with one label, read at scrape
// time: f returns each label value's count.
func (m *Metrics) LabelledCounter(name, help, label string, f func() map[string]float64) {
	m.reg.MustRegister(&labelledCounter{desc: prometheus.NewDesc(name, help, []string{label}, nil), f: f})
}

type labelledCounter struct {
	desc *prometheus.Desc
	f    func() map[string]float64
}

func (c *labelledCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *labelledCounter) Collect(ch chan<- prometheus.Metric) {
	for k, v := range c.f() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, k)
	}
}

type labelledGauge struct {
	desc *prometheus.Desc
	f    func() map[[2]string]float64
}

func (g *labelledGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }
func (g *labelledGauge) Collect(ch chan<- prometheus.Metric) {
	for k, v := range g.f() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, k[0], k[1])
	}
}

// Handler serves /metrics, /healthz (the process answers) and /readyz
// (ready returns nil: etcd reachable, lease held, API serving; otherwise
// 503 with the reason).
func (m *Metrics) Handler(ready func(ctx context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
