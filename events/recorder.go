package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/backoff"
	"shoal/metrics"
)

// Log is where a Recorder writes (store.EventLog).
type Log interface {
	// GrantLease grants a lease etcd revokes after ttl.
	GrantLease(ctx context.Context, ttl time.Duration) (int64, error)
	// WriteEvents writes each event on its lease. Errors: ErrLeaseGone;
	// a shoal.KindFailedPrecondition error when etcd refused the write
	// (writing it again would fail again); anything else may pass.
	WriteEvents(ctx context.Context, w []Write) error
}

// Write is one event for Log.WriteEvents: put on Lease; a Once event only
// if its key is absent.
type Write struct {
	Event *shoalv1.Event
	Lease int64
	Once  bool
}

// ErrLeaseGone: etcd does not know a lease of the write (it expired, or
// etcd was restored from a snapshot). The Recorder grants others.
var ErrLeaseGone = errors.New("events: the lease of an event write is gone")

// DefaultTTL is how long events are kept: an hour, as Kubernetes keeps
// its events (kube-apiserver --event-ttl).
const DefaultTTL = time.Hour

// Config of a Recorder.
type Config struct {
	// Node is the recording node's id (every event's reporting_node).
	Node string
	Log  Log
	// TTL is how long an event is kept after it happened (DefaultTTL):
	// between TTL and TTL plus a bucket (TTL/12).
	TTL time.Duration
	// QueueSize bounds the events waiting to be written (default 4096);
	// Record drops what does not fit.
	QueueSize int
	// MaxBatch is the most events one Txn writes (default 64; etcd's
	// --max-txn-ops must allow it).
	MaxBatch int
	// Burst and Refill bound the new keys per sandbox: Burst at once
	// (default 25), then one per Refill (default TTL/12).
	Burst  int
	Refill time.Duration
	// CoalesceWindow: a repeat within it rewrites the event it repeats
	// (default 10 minutes, at most TTL/2).
	CoalesceWindow time.Duration
	// WriteTimeout bounds one write (its lease grants included); default
	// 5s. FlushTimeout bounds the last flush at shutdown; default 2s.
	WriteTimeout time.Duration
	FlushTimeout time.Duration
	// RetryDelay and MaxRetryDelay space the attempts of a write that
	// failed for a reason that may pass (defaults 100ms and 5s).
	RetryDelay, MaxRetryDelay time.Duration
	Metrics                   *metrics.Metrics
	Logger                    *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultQueueSize      = 4096
	DefaultMaxBatch       = 64
	DefaultBurst          = 25
	DefaultCoalesceWindow = 10 * time.Minute
)

// maxTracked bounds the sandboxes whose last event and token bucket the
// Recorder remembers; past it they are all forgotten (a repeat then
// starts a new key, a sandbox a full bucket).
const maxTracked = 1 << 16

// Recorder records sandbox events (doc.go).
type Recorder struct {
	cfg    Config
	log    *slog.Logger
	bucket time.Duration
	q      chan queued
	// stopped: Start has returned or is flushing; Record drops.
	stopped atomic.Bool
	started atomic.Bool
	seq     atomic.Uint64

	written atomic.Int64
	dropped [5]atomic.Int64 // by dropReasons

	// Start's goroutine alone.
	leases    map[int64]int64         // time bucket → lease
	latest    map[string]*series      // sandbox (ws/name/uid) → the last event this node recorded of it
	tokens    map[string]*tokenBucket // sandbox uid → its bucket
	lastSweep time.Time
	failures  int       // writes failed in a row
	loggedAt  time.Time // of the last failure logged
}

type queued struct {
	ev   *shoalv1.Event
	once bool
}

// series is an event and the repeats coalesced into it.
type series struct {
	key         string // seriesKey: what a repeat has in common with it
	id          string
	first, last time.Time
	count       int32
}

type tokenBucket struct {
	tokens float64
	at     time.Time
}

// Drop reasons (metrics.EventDropReasons, in the same order).
const (
	dropQueueFull = iota
	dropRateLimited
	dropRefused
	dropExpired
	dropShutdown
)

var dropReasons = [...]string{"queue_full", "rate_limited", "refused", "expired", "shutdown"}

// New validates cfg and returns a Recorder; Start writes what it records.
func New(cfg Config) (*Recorder, error) {
	if cfg.Node == "" || cfg.Log == nil {
		return nil, errors.New("events: node and log are required")
	}
	if cfg.TTL < 0 || cfg.QueueSize < 0 || cfg.MaxBatch < 0 || cfg.Burst < 0 || cfg.Refill < 0 || cfg.CoalesceWindow < 0 {
		return nil, fmt.Errorf("events: negative bound in %+v", cfg)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	bucket := max(cfg.TTL/12, time.Second)
	if cfg.Refill == 0 {
		cfg.Refill = bucket
	}
	if cfg.CoalesceWindow == 0 {
		cfg.CoalesceWindow = DefaultCoalesceWindow
	}
	cfg.CoalesceWindow = min(cfg.CoalesceWindow, cfg.TTL/2)
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 2 * time.Second
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 100 * time.Millisecond
	}
	if cfg.MaxRetryDelay < cfg.RetryDelay {
		cfg.MaxRetryDelay = max(5*time.Second, cfg.RetryDelay)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{cfg: cfg, log: cfg.Logger.With("subsystem", "events"), bucket: bucket, q: make(chan queued, cfg.QueueSize),
		leases: map[int64]int64{}, latest: map[string]*series{}, tokens: map[string]*tokenBucket{}}, nil
}

// Record records e about sb. It never blocks and never fails: the event
// is queued for Start to write, or dropped and counted. A nil Recorder
// records nothing.
func (r *Recorder) Record(sb *shoalv1.Sandbox, e Event) {
	if r == nil {
		return
	}
	if r.stopped.Load() {
		r.drop(dropShutdown, 1)
		return
	}
	m := sb.GetMeta()
	if m.GetWorkspace() == "" || m.GetName() == "" || e.Once && (e.At.IsZero() || m.GetUid() == "") {
		r.log.Error("event without a sandbox to key it by, or a Once event without its time and uid: not recorded (a bug)", "reason", e.Reason, "sandbox", m.GetName())
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.cfg.Now()
	}
	node := sb.GetSpec().GetNode()
	if node == "" {
		node = sb.GetStatus().GetNode()
	}
	ts := timestamppb.New(at)
	ev := &shoalv1.Event{
		Workspace: m.GetWorkspace(), Sandbox: m.GetName(), SandboxUid: m.GetUid(),
		Severity: severity(e.Reason, e.Warning), Reason: string(e.Reason), Message: Truncate(e.Message, MaxMessageBytes),
		Details: details(e.Details), Node: node, ReportingNode: r.cfg.Node, Reporter: reasons[e.Reason].reporter,
		FirstTime: ts, LastTime: ts, Count: 1,
	}
	select {
	case r.q <- queued{ev: ev, once: e.Once}:
	default:
		r.drop(dropQueueFull, 1)
	}
}

// Queued is how many events wait to be written.
func (r *Recorder) Queued() int { return len(r.q) }

// Stats are what a Recorder has written and dropped, by drop reason
// (metrics.EventDropReasons).
type Stats struct {
	Written int64
	Dropped map[string]int64
}

// Stats returns the counts so far.
func (r *Recorder) Stats() Stats {
	s := Stats{Written: r.written.Load(), Dropped: map[string]int64{}}
	for i, name := range dropReasons {
		s.Dropped[name] = r.dropped[i].Load()
	}
	return s
}

func (r *Recorder) drop(reason, n int) {
	if n == 0 {
		return
	}
	r.dropped[reason].Add(int64(n))
	r.cfg.Metrics.EventsDropped(dropReasons[reason], n)
}

// Start writes what Record queues until ctx ends, then flushes what is
// left for at most FlushTimeout and returns. It never fails; a second
// Start is an error.
func (r *Recorder) Start(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("events: the recorder was started already")
	}
	for {
		var first queued
		select {
		case <-ctx.Done():
			r.shutdown(ctx, nil)
			return nil
		case first = <-r.q:
		}
		writes := r.prepare(r.fill(first))
		if left := r.commit(ctx, writes); left != nil {
			r.shutdown(ctx, left)
			return nil
		}
	}
}

// fill takes first and what else is queued, up to MaxBatch.
func (r *Recorder) fill(first queued) []queued {
	batch := []queued{first}
	for len(batch) < r.cfg.MaxBatch {
		select {
		case q := <-r.q:
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}

// shutdown stops Record, then writes left and what is still queued for
// at most FlushTimeout; what it cannot write is dropped.
func (r *Recorder) shutdown(ctx context.Context, left []Write) {
	r.stopped.Store(true)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FlushTimeout)
	defer cancel()
	for {
		var batch []queued
	drain:
		for len(batch) < r.cfg.MaxBatch {
			select {
			case q := <-r.q:
				batch = append(batch, q)
			default:
				break drain
			}
		}
		writes := append(left, r.prepare(batch)...)
		left = nil
		if len(writes) == 0 {
			return
		}
		if rest := r.commit(fctx, writes); rest != nil {
			r.drop(dropShutdown, len(rest))
			// Whatever else is queued cannot be written either.
			for {
				select {
				case <-r.q:
					r.drop(dropShutdown, 1)
				default:
					return
				}
			}
		}
	}
}

// prepare turns queued events into writes: coalesced into the event they
// repeat (the last this node recorded of the sandbox, within the
// window), rate limited per sandbox, given ids; one write per key.
func (r *Recorder) prepare(batch []queued) []Write {
	now := r.cfg.Now()
	r.sweep(now)
	var out []Write
	at := map[string]int{} // key in the batch → index in out
	for _, q := range batch {
		ev := q.ev
		of := ev.Workspace + "/" + ev.Sandbox + "/" + ev.SandboxUid
		if q.once {
			ev.Id = fmt.Sprintf("%016x.%s.%s", ev.FirstTime.AsTime().UnixNano(), ev.Reason, ev.SandboxUid)
			out = append(out, Write{Event: ev, Once: true})
			delete(r.latest, of) // what follows it repeats nothing before it
			continue
		}
		t := ev.FirstTime.AsTime()
		key := seriesKey(ev)
		if s := r.latest[of]; s != nil && s.key == key && t.Sub(s.last) <= r.cfg.CoalesceWindow && !t.Before(s.first) {
			s.count++
			s.last = maxTime(s.last, t)
			ev.Id, ev.Count = s.id, s.count
			ev.FirstTime, ev.LastTime = timestamppb.New(s.first), timestamppb.New(s.last)
		} else {
			if !r.allow(ev.SandboxUid, now) {
				r.drop(dropRateLimited, 1)
				delete(r.latest, of) // it happened all the same: what follows repeats nothing before it
				continue
			}
			ev.Id = fmt.Sprintf("%016x.%s.%d", t.UnixNano(), r.cfg.Node, r.seq.Add(1))
			r.latest[of] = &series{key: key, id: ev.Id, first: t, last: t, count: 1}
		}
		k := of + "/" + ev.Id
		if i, ok := at[k]; ok {
			out[i].Event = ev // a repeat in the same batch: one write
			continue
		}
		at[k] = len(out)
		out = append(out, Write{Event: ev})
	}
	return out
}

// seriesKey: events of one sandbox with the same key are repeats of one
// another.
func seriesKey(ev *shoalv1.Event) string {
	var b strings.Builder
	for _, s := range []string{ev.Reason, ev.Severity.String(), ev.Message, ev.Node} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	for _, k := range slices.Sorted(maps.Keys(ev.Details)) {
		b.WriteString(k)
		b.WriteByte(1)
		b.WriteString(ev.Details[k])
		b.WriteByte(0)
	}
	return b.String()
}

// allow takes a token of the sandbox's bucket, if it has one.
func (r *Recorder) allow(uid string, now time.Time) bool {
	b, ok := r.tokens[uid]
	if !ok {
		b = &tokenBucket{tokens: float64(r.cfg.Burst), at: now}
		r.tokens[uid] = b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(r.cfg.Burst), b.tokens+float64(d)/float64(r.cfg.Refill))
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep forgets, once a minute or when they grow past maxTracked, the
// last events past the window, the token buckets that would be full again
// and the leases that have expired; past maxTracked still, all of them.
func (r *Recorder) sweep(now time.Time) {
	if now.Sub(r.lastSweep) < time.Minute && len(r.latest) < maxTracked && len(r.tokens) < maxTracked {
		return
	}
	r.lastSweep = now
	full := time.Duration(r.cfg.Burst) * r.cfg.Refill
	maps.DeleteFunc(r.latest, func(_ string, s *series) bool { return now.Sub(s.last) > r.cfg.CoalesceWindow })
	maps.DeleteFunc(r.tokens, func(_ string, b *tokenBucket) bool { return now.Sub(b.at) >= full })
	maps.DeleteFunc(r.leases, func(bucket, _ int64) bool { return r.bucketEnd(bucket).Add(r.cfg.TTL).Before(now) })
	if len(r.latest) >= maxTracked {
		clear(r.latest)
	}
	if len(r.tokens) >= maxTracked {
		clear(r.tokens)
	}
}

func (r *Recorder) bucketOf(t time.Time) int64 { return t.UnixNano() / int64(r.bucket) }

func (r *Recorder) bucketEnd(b int64) time.Time { return time.Unix(0, (b+1)*int64(r.bucket)) }

// commit writes ws until it succeeds or etcd refuses it, retrying what may
// pass with a growing delay; it drops what has expired meanwhile. If ctx
// ends first it returns what is still to be written.
func (r *Recorder) commit(ctx context.Context, ws []Write) []Write {
	retry := backoff.Policy{Initial: r.cfg.RetryDelay, Max: r.cfg.MaxRetryDelay, Jitter: 0.2}
	for attempt := 0; ; attempt++ {
		ws = r.unexpired(ws)
		if len(ws) == 0 {
			return nil
		}
		err := r.write(ctx, ws)
		switch {
		case err == nil:
			r.written.Add(int64(len(ws)))
			r.cfg.Metrics.EventsWritten(len(ws))
			if r.failures > 0 {
				r.log.Info("events are written again", "failed_writes", r.failures)
			}
			r.failures = 0
			return nil
		case errors.Is(err, ErrLeaseGone):
			clear(r.leases) // granted afresh by the next attempt
		case shoal.KindOf(err) == shoal.KindFailedPrecondition:
			r.drop(dropRefused, len(ws))
			r.log.Warn("etcd refused a write of events; they are dropped", "events", len(ws), "err", err)
			return nil
		}
		if ctx.Err() != nil {
			return ws
		}
		r.failures++
		if now := r.cfg.Now(); now.Sub(r.loggedAt) >= time.Minute {
			r.loggedAt = now
			r.log.Warn("events cannot be written; trying again (new ones queue, and are dropped once the queue is full)", "events", len(ws), "queued", len(r.q), "err", err)
		}
		t := time.NewTimer(retry.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return ws
		case <-t.C:
		}
	}
}

// unexpired drops the writes whose events have outlived the TTL.
func (r *Recorder) unexpired(ws []Write) []Write {
	now := r.cfg.Now()
	n := len(ws)
	ws = slices.DeleteFunc(ws, func(w Write) bool { return now.Sub(w.Event.LastTime.AsTime()) >= r.cfg.TTL })
	r.drop(dropExpired, n-len(ws))
	return ws
}

// write puts ws on the leases of their time buckets, granting those it
// lacks, within WriteTimeout.
func (r *Recorder) write(ctx context.Context, ws []Write) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	now := r.cfg.Now()
	for i := range ws {
		b := r.bucketOf(ws[i].Event.LastTime.AsTime())
		l, ok := r.leases[b]
		if !ok {
			// Until the bucket's end plus the TTL: every event of the
			// bucket lives at least a TTL.
			ttl := max(r.bucketEnd(b).Add(r.cfg.TTL).Sub(now), time.Second)
			var err error
			if l, err = r.cfg.Log.GrantLease(ctx, ttl); err != nil {
				return err
			}
			r.leases[b] = l
		}
		ws[i].Lease = l
	}
	return r.cfg.Log.WriteEvents(ctx, ws)
}

// details copies d within the bounds of an event.
func details(d map[string]string) map[string]string {
	if len(d) == 0 {
		return nil
	}
	out := make(map[string]string, min(len(d), MaxDetails))
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if len(out) == MaxDetails {
			break
		}
		out[Truncate(k, MaxDetailBytes)] = Truncate(d[k], MaxDetailBytes)
	}
	return out
}

// Truncate cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
