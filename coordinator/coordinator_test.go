package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/coordinator"
	"shoal/embedetcd"
	"shoal/events"
	"shoal/internal/testenv"
	"shoal/lease"
	"shoal/store"
)

// The tests run a Coordinator against a real embedded etcd and a real
// lease.Elector. The coordinator's store talks through a client of its own
// whose KV records every write (writeLog), so a test can say what the
// leader wrote, and when; the test's own set-up goes through another.

// env is one etcd, a store for the test's set-up, and what it takes to
// start coordinators.
type env struct {
	t   *testing.T
	srv *embedetcd.Server
	c   *clientv3.Client // set-up and elections
	s   *store.Store
	ctx context.Context
}

func newEnv(t *testing.T) *env {
	c, srv := testenv.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, srv: srv, c: c, s: store.New(c, store.Options{}), ctx: ctx}
}

// leader is one coordinator with its elector.
type leader struct {
	writes *writeLog
	terms  *termLog
	logs   *logBuffer
}

type opts struct {
	id          string
	fenceMargin time.Duration
	resync      time.Duration
	// deaf: the coordinator's term does not end when the lease is lost
	// (a leader that has not noticed yet: a pause, a slow keepalive), so
	// only its fenced writes can stop it.
	deaf bool
	// gate, if set, holds every term after the first until it is closed.
	gate chan struct{}
	// events, if set, records the leader's events (fenced_test.go).
	events *events.Recorder
}

// start runs a coordinator until the test ends.
func (e *env) start(o opts) *leader {
	t := e.t
	t.Helper()
	if o.id == "" {
		o.id = "leader"
	}
	if o.resync == 0 {
		o.resync = time.Hour // watches only, past the first resync
	}
	own, err := e.srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { own.Close() })
	w := &writeLog{KV: own.KV}
	own.KV = w
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	el, err := lease.New(e.c, lease.Config{Prefix: e.s.LeaderPrefix(), TermKey: e.s.LeaderTermKey(), ID: o.id,
		TTL: 2 * time.Second, RetryInterval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	terms := &termLog{inner: el, deaf: o.deaf, gate: o.gate, began: make(chan struct{}, 16), ended: make(chan struct{}, 16)}
	var rec coordinator.Events
	if o.events != nil {
		rec = o.events
	}
	co, err := coordinator.New(coordinator.Config{
		Store:       store.New(own, store.Options{Logger: log, Events: o.events}),
		Events:      rec,
		Elector:     terms,
		FenceMargin: o.fenceMargin,
		Workers:     4,
		Resync:      o.resync,
		Logger:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- co.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
		if t.Failed() {
			t.Logf("coordinator %s log:\n%s", o.id, logs.String())
		}
	})
	return &leader{writes: w, terms: terms, logs: logs}
}

// termLog wraps a lease.Elector: it tells the test when each term begins
// and when the coordinator's work for it has returned.
type termLog struct {
	inner *lease.Elector
	deaf  bool
	gate  chan struct{}
	began chan struct{} // one per term, when it begins
	ended chan struct{} // one per term, when the coordinator's lead returned

	mu sync.Mutex
	n  int
}

func (e *termLog) Run(ctx context.Context, lead func(context.Context, *lease.Leadership) error) error {
	return e.inner.Run(ctx, func(lctx context.Context, l *lease.Leadership) error {
		e.mu.Lock()
		n := e.n
		e.n++
		e.mu.Unlock()
		e.began <- struct{}{}
		if n > 0 && e.gate != nil {
			select {
			case <-e.gate:
			case <-lctx.Done():
				e.ended <- struct{}{}
				return lctx.Err()
			}
		}
		run := lctx
		if e.deaf {
			run = ctx
		}
		err := lead(run, l)
		e.ended <- struct{}{}
		return err
	})
}

var _ coordinator.Elector = (*termLog)(nil)

// write is one write the coordinator sent to etcd, the i-th it began.
type write struct {
	i         int
	keys      []string
	succeeded bool
	err       error
}

// writeLog is a KV that records every write through it: Put, Delete, and
// any Txn with a Put or Delete among its ops. before, if set, runs just
// before a write is sent.
type writeLog struct {
	clientv3.KV

	begin   sync.Mutex
	mu      sync.Mutex
	started int
	done    []write
	before  func(i int)
}

// count is how many writes were begun.
func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started
}

// since returns the finished writes that were begun i-th or later.
func (w *writeLog) since(i int) []write {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []write
	for _, wr := range w.done {
		if wr.i >= i {
			out = append(out, wr)
		}
	}
	return out
}

func (w *writeLog) record(ctx context.Context, keys []string, send func() (bool, error)) {
	if ctx.Err() != nil {
		_, _ = send() // fails at once: nothing reaches etcd
		return
	}
	// Writes begin one at a time: the i-th is sent only once before(i)
	// has returned, and so after every write before it has begun.
	w.begin.Lock()
	w.mu.Lock()
	i, before := w.started, w.before
	w.started++
	w.mu.Unlock()
	if before != nil {
		before(i)
	}
	w.begin.Unlock()
	ok, err := send()
	w.mu.Lock()
	w.done = append(w.done, write{i: i, keys: keys, succeeded: ok, err: err})
	w.mu.Unlock()
}

func (w *writeLog) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (resp *clientv3.PutResponse, err error) {
	w.record(ctx, []string{key}, func() (bool, error) {
		resp, err = w.KV.Put(ctx, key, val, opts...)
		return err == nil, err
	})
	return resp, err
}

func (w *writeLog) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.DeleteResponse, err error) {
	w.record(ctx, []string{key}, func() (bool, error) {
		resp, err = w.KV.Delete(ctx, key, opts...)
		return err == nil, err
	})
	return resp, err
}

func (w *writeLog) Txn(ctx context.Context) clientv3.Txn {
	return &loggedTxn{Txn: w.KV.Txn(ctx), w: w, ctx: ctx}
}

type loggedTxn struct {
	clientv3.Txn
	w    *writeLog
	ctx  context.Context
	keys []string
}

func (t *loggedTxn) note(ops []clientv3.Op) {
	for _, op := range ops {
		if op.IsPut() || op.IsDelete() {
			t.keys = append(t.keys, string(op.KeyBytes()))
		}
	}
}

func (t *loggedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *loggedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.note(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *loggedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.note(ops)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *loggedTxn) Commit() (resp *clientv3.TxnResponse, err error) {
	if len(t.keys) == 0 {
		return t.Txn.Commit() // a read
	}
	t.w.record(t.ctx, t.keys, func() (bool, error) {
		resp, err = t.Txn.Commit()
		return err == nil && resp.Succeeded, err
	})
	return resp, err
}

// logBuffer collects a coordinator's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wait receives from ch, or fails the test after within.
func wait(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}

// register makes a live node; revoking the returned lease loses it.
func (e *env) register(name string) clientv3.LeaseID {
	e.t.Helper()
	l, err := e.c.Grant(e.ctx, 60)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.RegisterNode(e.ctx, store.Registration{Node: &shoalv1.Node{Name: name, Address: name + ":7443"}, Instance: name}, l.ID); err != nil {
		e.t.Fatal(err)
	}
	return l.ID
}

func (e *env) lose(l clientv3.LeaseID) {
	e.t.Helper()
	if _, err := e.c.Revoke(e.ctx, l); err != nil {
		e.t.Fatal(err)
	}
}

// sandbox creates a sandbox on node holding providers.
func (e *env) sandbox(name, node string, providers ...string) *shoalv1.Sandbox {
	e.t.Helper()
	sb, err := e.s.CreateSandboxOn(e.ctx, &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name},
		Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Providers: providers},
	}, store.Placement{Node: node}, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e *env) provider(name string) {
	e.t.Helper()
	if _, err := e.s.CreateProvider(e.ctx, &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": "k"}}); err != nil {
		e.t.Fatal(err)
	}
}

// deleting runs the deletion protocol's step 1 on a sandbox.
func (e *env) deleting(name string) {
	e.t.Helper()
	if _, err := e.s.MarkSandboxDeleting(e.ctx, "default", name, store.Preconditions{}); err != nil {
		e.t.Fatal(err)
	}
}

// tornDown is the owner's step 2.
func (e *env) tornDown(sb *shoalv1.Sandbox) {
	e.t.Helper()
	if err := e.s.RecordTeardown(e.ctx, "default", sb.Meta.Name, sb.Meta.Uid); err != nil {
		e.t.Fatal(err)
	}
}

// terminating asks for a provider's deletion while a DELETING sandbox
// still holds it.
func (e *env) terminating(name string) {
	e.t.Helper()
	deleted, _, err := e.s.DeleteProvider(e.ctx, "default", name, store.Preconditions{})
	if err != nil || deleted {
		e.t.Fatalf("DeleteProvider %s: deleted %v, %v; want it terminating", name, deleted, err)
	}
}

func (e *env) gone(what string, get func() error) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, what+" gone", func() (bool, error) {
		err := get()
		if shoal.KindOf(err) == shoal.KindNotFound {
			return true, nil
		}
		return false, err
	})
}

func (e *env) sandboxGone(name string) {
	e.t.Helper()
	e.gone("sandbox "+name, func() error { _, err := e.s.GetSandbox(e.ctx, "default", name); return err })
}

func (e *env) providerGone(name string) {
	e.t.Helper()
	e.gone("provider "+name, func() error { _, err := e.s.GetProvider(e.ctx, "default", name); return err })
}

func (e *env) keyGone(key string) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, key+" gone", func() (bool, error) {
		resp, err := e.c.Get(e.ctx, key, clientv3.WithCountOnly())
		return err == nil && resp.Count == 0, err
	})
}

func (e *env) put(key, val string) {
	e.t.Helper()
	if _, err := e.c.Put(e.ctx, key, val); err != nil {
		e.t.Fatal(err)
	}
}

// lost waits until the leader has recorded node's loss and given its
// sandbox name phase UNKNOWN, and returns when the loss was recorded.
func (e *env) lost(node, name string) time.Time {
	e.t.Helper()
	var since time.Time
	testenv.Eventually(e.t, 20*time.Second, "node "+node+" lost, sandbox "+name+" UNKNOWN", func() (bool, error) {
		lost, err := e.s.LostNodes(e.ctx)
		if err != nil {
			return false, err
		}
		since = lost[node]
		sb, err := e.s.GetSandbox(e.ctx, "default", name)
		if err != nil {
			return false, err
		}
		return !since.IsZero() && sb.GetStatus().GetPhase() == shoalv1.SandboxPhase_UNKNOWN, nil
	})
	return since
}

// depose revokes the lease of the current leader's election key behind
// its elector's back. It may run off the test's goroutine.
func (e *env) depose() error {
	term, ok, err := lease.Current(e.ctx, e.c, e.s.LeaderPrefix(), e.s.LeaderTermKey())
	if err != nil || !ok {
		return fmt.Errorf("current term: ok %v, %v", ok, err)
	}
	resp, err := e.c.Get(e.ctx, term.Key)
	if err != nil || len(resp.Kvs) == 0 {
		return fmt.Errorf("leader key %s: %v", term.Key, err)
	}
	_, err = e.c.Revoke(e.ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

// While it leads, the coordinator does what doc.go says, driven by watches
// alone (the periodic resync is an hour away): it removes a DELETING
// sandbox once its owner recorded the teardown and finalises the
// providers it released; it records a node's loss and gives its sandboxes
// phase UNKNOWN; it removes a lost node's sandbox without the owner, but
// not before the fence margin has passed since the loss.
func TestLeaderWorkFromWatches(t *testing.T) {
	e := newEnv(t)
	e.register("n1")
	l2 := e.register("n2")
	const margin = 2 * time.Second
	co := e.start(opts{fenceMargin: margin})
	wait(t, co.terms.began, 20*time.Second, "leadership")

	// Sandbox removal, and the providers it released.
	e.provider("p")
	a := e.sandbox("a", "n1", "p")
	e.sandbox("c", "n2")
	e.deleting("a")
	e.terminating("p")
	e.tornDown(a)
	e.sandboxGone("a")
	e.providerGone("p")

	// Node loss.
	e.lose(l2)
	since := e.lost("n2", "c")

	// A lost owner's sandbox: removed once the fence margin has passed.
	e.deleting("c")
	e.sandboxGone("c")
	if now := time.Now(); now.Before(since.Add(margin)) {
		t.Fatalf("sandbox of node lost at %s removed by %s, within the fence margin %s", since, now, margin)
	}
	// A live owner that has not torn down holds its sandbox: the leader
	// wrote nothing for it (checked after a later removal it made).
	b := e.sandbox("b", "n1")
	e.deleting("b")
	d := e.sandbox("d", "n1")
	e.deleting("d")
	e.tornDown(d)
	e.sandboxGone("d")
	if _, err := e.s.GetSandbox(e.ctx, "default", "b"); err != nil {
		t.Fatalf("sandbox b, whose owner has not torn it down: %v", err)
	}
	for _, w := range co.writes.since(0) {
		for _, k := range w.keys {
			if k == e.s.SandboxKey("default", "b") {
				t.Fatalf("the leader wrote %s before its owner's teardown", k)
			}
		}
	}
	e.tornDown(b)
	e.sandboxGone("b")
}

// Work pending when a leader starts (left by a crash, or by a term that
// ended) is found by its first resync: one of every kind of task.
func TestFirstResyncFindsAllPendingWork(t *testing.T) {
	e := newEnv(t)
	e.register("n1")
	l2 := e.register("n2")
	l3 := e.register("n3")

	// remove-sandbox: torn down by its owner.
	a := e.sandbox("a", "n1")
	e.deleting("a")
	e.tornDown(a)
	// finalize-provider: terminating, and no sandbox holds it any more.
	e.provider("q")
	b := e.sandbox("b", "n1", "q")
	e.deleting("b")
	e.terminating("q")
	e.tornDown(b)
	if _, err := e.s.RemoveSandbox(e.ctx, "default", "b", b.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	// node-lost: its registry key expired with no leader watching.
	e.sandbox("c", "n2")
	e.lose(l2)
	// forget-node: `shoal node remove` on a NotReady node with no sandbox.
	e.lose(l3)
	if err := e.s.ForgetNode(e.ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	// repair: a deletion intent that matches no record, and an attachment
	// key no sandbox holds.
	intent, stray := store.DefaultPrefix+"/deleting/default/ghost", store.DefaultPrefix+"/attach/default/nosuch/ghost"
	e.put(intent, "uid-of-nothing")
	e.put(stray, "uid-of-nothing")

	co := e.start(opts{})
	wait(t, co.terms.began, 20*time.Second, "leadership")
	e.sandboxGone("a")
	e.providerGone("q")
	e.lost("n2", "c")
	testenv.Eventually(t, 20*time.Second, "node n3 forgotten", func() (bool, error) {
		_, err := e.s.GetNode(e.ctx, "n3")
		return shoal.KindOf(err) == shoal.KindNotFound, nil
	})
	e.keyGone(intent)
	e.keyGone(stray)
}

// Leader-only work stops the moment the lease is lost: here in the middle
// of a batch of removals, the lease revoked just before one of its writes
// is sent. That write is refused, the term's work returns, and nothing is
// written in its name after; the next term finishes the batch.
func TestLeaderWorkStopsWhenLeaseLost(t *testing.T) {
	e := newEnv(t)
	e.register("n1")
	const n = 30
	for i := range n {
		name := "s" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		sb := e.sandbox(name, "n1")
		e.deleting(name)
		e.tornDown(sb)
	}
	gate := make(chan struct{})
	co := e.start(opts{gate: gate})
	const lossAt = 5 // the leader's sixth write
	revoked := make(chan error, 1)
	co.writes.mu.Lock()
	co.writes.before = func(i int) {
		if i == lossAt {
			revoked <- e.depose()
		}
	}
	co.writes.mu.Unlock()
	wait(t, co.terms.began, 20*time.Second, "leadership")
	select {
	case err := <-revoked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the leader wrote too little")
	}
	// The lease is 2s; its loss must end the term well within that.
	wait(t, co.terms.ended, 5*time.Second, "the term's work returning after the lease was lost")
	stopped := co.writes.count()
	for _, w := range co.writes.since(lossAt) {
		if w.succeeded {
			t.Fatalf("a write begun after the lease was lost succeeded: %+v", w)
		}
	}
	// Past the loss, at most the write that met it and one per other
	// worker already on its way.
	if after := stopped - lossAt; after < 1 || after > 4 {
		t.Fatalf("%d writes begun after the lease was lost (%+v); want 1 to 4 (one per worker)", after, co.writes.since(lossAt))
	}
	if !strings.Contains(co.logs.String(), "fenced out; stopping leader loops") {
		t.Fatal("the refused write did not stop the term")
	}
	removed := 0
	for _, w := range co.writes.since(0) {
		if w.succeeded {
			removed++
		}
	}
	// The elector wins again; until its term runs, nothing is written.
	wait(t, co.terms.began, 20*time.Second, "the next term")
	if more := co.writes.count() - stopped; more > 0 {
		t.Fatalf("%d writes after the lost term's work returned: %+v", more, co.writes.since(stopped))
	}
	left, err := e.s.ListSandboxes(e.ctx, "default", store.ListOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != n-removed {
		t.Fatalf("%d sandboxes left; want %d (%d removed by the lost term)", len(left.Items), n-removed, removed)
	}
	close(gate)
	testenv.Eventually(t, 30*time.Second, "the next term removing the rest", func() (bool, error) {
		page, err := e.s.ListSandboxes(e.ctx, "default", store.ListOptions{}, nil)
		return err == nil && len(page.Items) == 0, err
	})
}

// A deposed leader that has not noticed its loss (deaf: its term goes on)
// is refused its first leader-only write, and stops.
func TestDeposedLeaderIsFencedOut(t *testing.T) {
	e := newEnv(t)
	e.register("n1")
	deposed := e.start(opts{id: "a", deaf: true})
	wait(t, deposed.terms.began, 20*time.Second, "leadership")

	// Another node takes over once a's lease is gone; it does no work.
	el, err := lease.New(e.c, lease.Config{Prefix: e.s.LeaderPrefix(), ID: "b", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	leads := make(chan struct{}, 1)
	go func() {
		done <- el.Run(ctx, func(lctx context.Context, _ *lease.Leadership) error {
			leads <- struct{}{}
			<-lctx.Done()
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	if err := e.depose(); err != nil {
		t.Fatal(err)
	}
	wait(t, leads, 20*time.Second, "the new leader")
	before := deposed.writes.count()

	w := e.sandbox("w", "n1")
	e.deleting("w")
	e.tornDown(w)
	wait(t, deposed.terms.ended, 20*time.Second, "the deposed leader stopping")
	if _, err := e.s.GetSandbox(e.ctx, "default", "w"); err != nil {
		t.Fatalf("the deposed leader's removal was applied: %v", err)
	}
	refused := false
	for _, wr := range deposed.writes.since(before) {
		if wr.succeeded {
			t.Fatalf("a write of the deposed leader succeeded: %+v", wr)
		}
		for _, k := range wr.keys {
			refused = refused || k == e.s.SandboxKey("default", "w")
		}
	}
	if !refused {
		t.Fatal("the deposed leader stopped without trying its write")
	}
	if !strings.Contains(deposed.logs.String(), "fenced out; stopping leader loops") {
		t.Fatal("the deposed leader did not say why it stopped")
	}
}
