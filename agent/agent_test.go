package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/registry"
	"shoal/store"
)

// calls records when a stream was opened.
type calls struct {
	mu sync.Mutex
	at []time.Time
}

func (c *calls) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	return len(c.at)
}

func (c *calls) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// breakingStore is the real store, except that its first sandbox watches
// break as soon as they open, as they do while etcd has no leader.
type breakingStore struct {
	*store.Store
	breaks  int
	watches calls
}

func (b *breakingStore) WatchNodeSandboxes(ctx context.Context, node string, fromRev int64) <-chan store.Event[*shoalv1.Sandbox] {
	if b.watches.add() <= b.breaks {
		ch := make(chan store.Event[*shoalv1.Sandbox], 1)
		ch <- store.Event[*shoalv1.Sandbox]{Err: shoal.Unavailable("watch ended: etcd lost its leader")}
		close(ch)
		return ch
	}
	return b.Store.WatchNodeSandboxes(ctx, node, fromRev)
}

// breakingRuntime is the real runtime, except that its first event
// streams fail at once, as they do while the engine restarts.
type breakingRuntime struct {
	*docker.Runtime
	breaks int
	events calls
}

func (b *breakingRuntime) Events(ctx context.Context) (<-chan shoal.ContainerEvent, <-chan error) {
	if b.events.add() <= b.breaks {
		out, errs := make(chan shoal.ContainerEvent), make(chan error, 1)
		errs <- errors.New("connection refused")
		close(out)
		close(errs)
		return out, errs
	}
	return b.Runtime.Events(ctx)
}

// E. A sandbox watch or event stream that breaks as soon as it opens is
// reopened after a doubling delay, not in a tight loop; once the streams
// hold again the agent works.
func TestBrokenStreamsAreReopenedWithBackoff(t *testing.T) {
	testenv.RequireDocker(t)
	cli, _ := testenv.Etcd(t)
	st := store.New(cli, store.Options{})
	node := fmt.Sprintf("ag%x", time.Now().UnixNano())[:14]
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{Node: node, Cluster: "agenttest"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	const breaks = 5
	bs := &breakingStore{Store: st, breaks: breaks}
	br := &breakingRuntime{Runtime: rt, breaks: breaks}
	reg := register(ctx, t, st, cli, node)
	const delay = 50 * time.Millisecond
	defer run(ctx, t, reg, agent.Config{Node: node, Store: bs, Runtime: br, Lease: reg, Resync: 200 * time.Millisecond,
		RestartDelay: delay, MaxRestartDelay: 10 * time.Second})()

	// The agent works once the streams hold: a sandbox gets its container.
	_, err = st.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "after"},
		Spec: &shoalv1.SandboxSpec{Image: docker.DefaultImage}, Status: &shoalv1.SandboxStatus{Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "sandbox READY after the streams recovered", func() (bool, error) {
		sb, err := st.GetSandbox(ctx, "default", "after")
		return err == nil && sb.Status.Phase == shoalv1.SandboxPhase_READY, err
	})

	for what, c := range map[string]*calls{"sandbox watch": &bs.watches, "docker events": &br.events} {
		testenv.Eventually(t, time.Minute, what+" reopened after every break", func() (bool, error) {
			return len(c.times()) > breaks, nil
		})
		at := c.times()
		if len(at) != breaks+1 {
			t.Fatalf("%s opened %d times; want %d (%d breaks, then one that held)", what, len(at), breaks+1, breaks)
		}
		// Each reopen waits twice as long as the one before: 50, 100,
		// 200, 400, 800 ms.
		for i := 1; i < len(at); i++ {
			want := delay << (i - 1)
			if gap := at[i].Sub(at[i-1]); gap < want {
				t.Fatalf("%s reopened %s after break %d; want at least %s", what, gap, i, want)
			}
		}
	}
}

// register registers node in the registry, for an agent's lease.
func register(ctx context.Context, t *testing.T, st *store.Store, cli *clientv3.Client, node string) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{Store: st, Etcd: cli, Node: &shoalv1.Node{Name: node}, Instance: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(ctx); err != nil {
		t.Fatal(err)
	}
	return reg
}

// run starts an agent of cfg and reg's lease renewals; the function it
// returns stops both and fails the test if either ended with an error.
func run(ctx context.Context, t *testing.T, reg *registry.Registry, cfg agent.Config) (stop func()) {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done, regDone := make(chan error, 1), make(chan error, 1)
	go func() { done <- a.Start(actx) }()
	go func() { regDone <- reg.Start(actx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		if err := <-regDone; err != nil {
			t.Errorf("registry: %v", err)
		}
	}
}

// hangingRuntime is the real runtime, except that its first Remove hangs
// until its caller gives up, as a call to an engine that stopped
// answering does.
type hangingRuntime struct {
	*docker.Runtime
	removes calls
}

func (h *hangingRuntime) Remove(ctx context.Context, uid string) error {
	if h.removes.add() == 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Runtime.Remove(ctx, uid)
}

// A reconcile that hangs (here the container removal of a deletion) is
// given up after ReconcileTimeout and tried again, rather than holding the
// sandbox's name for good: the teardown completes.
func TestHungReconcileIsRetried(t *testing.T) {
	testenv.RequireDocker(t)
	cli, _ := testenv.Etcd(t)
	st := store.New(cli, store.Options{})
	node := fmt.Sprintf("ah%x", time.Now().UnixNano())[:14]
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{Node: node, Cluster: "agenttest"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	hr := &hangingRuntime{Runtime: rt}
	reg := register(ctx, t, st, cli, node)
	const timeout = 500 * time.Millisecond
	defer run(ctx, t, reg, agent.Config{Node: node, Store: st, Runtime: hr, Lease: reg, Resync: time.Hour, ReconcileTimeout: timeout})()
	sb, err := st.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "hung"},
		Spec: &shoalv1.SandboxSpec{Image: docker.DefaultImage}, Status: &shoalv1.SandboxStatus{Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "sandbox READY", func() (bool, error) {
		got, err := st.GetSandbox(ctx, "default", "hung")
		return err == nil && got.Status.Phase == shoalv1.SandboxPhase_READY, err
	})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	teardowns := st.WatchTeardowns(wctx)
	start := time.Now()
	if _, err := st.MarkSandboxDeleting(ctx, "default", "hung", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	recorded := false
	for ev := range teardowns {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ws, name := store.TeardownName(ev.Name); ws == "default" && name == "hung" && !ev.Deleted {
			recorded = true
			break
		}
	}
	took := time.Since(start)
	if !recorded {
		t.Fatalf("no teardown recorded in %s (%d container removals)", took.Round(time.Millisecond), len(hr.removes.times()))
	}
	if n := len(hr.removes.times()); n < 2 {
		t.Fatalf("teardown recorded after %d container removals; want the hung one and a retry", n)
	}
	if took < timeout {
		t.Fatalf("teardown recorded after %s, before the hung removal's %s timeout", took, timeout)
	}
	cs, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.UID == sb.Meta.Uid {
			t.Fatalf("container %s of the torn-down sandbox is still there", c.ID)
		}
	}
}
