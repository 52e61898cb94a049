package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/registry"
	"shoal/store"
)

// The samplers against the real parts: the keyspace watch against an
// embedded etcd with a real registry and real placement, the engine
// sampler against private Docker engines.

func randomID(prefix string) string {
	var b [3]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func TestKeyspaceWatchAgainstEtcd(t *testing.T) {
	t.Parallel()
	cli, _ := testenv.Etcd(t)
	const prefix = "/chaostest"
	st := store.New(cli, store.Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The watch starts first: the node's registration is a change it sees.
	w := NewKeyspaceWatch(cli, prefix)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(wctx) })
	defer wg.Wait()
	defer stop()
	<-w.Ready()

	reg, err := registry.New(registry.Config{Store: st, Etcd: cli, Node: &shoalv1.Node{Name: "n1", MaxSandboxes: 1},
		Instance: "test", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, unregister := context.WithCancel(ctx)
	defer unregister()
	if err := reg.Register(rctx); err != nil {
		t.Fatal(err)
	}
	// Placement: the first create takes n1's one slot, the second finds
	// it full.
	mk := func(name string) *shoalv1.Sandbox {
		return &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{}}
	}
	if _, err := st.CreateSandboxOn(ctx, mk("a"), store.Placement{}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandboxOn(ctx, mk("b"), store.Placement{}, ""); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Fatalf("second create on a full node: %v", err)
	}
	// Sync: every change so far is applied, with nothing else to wait for.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := w.Sync(sctx); err != nil {
		t.Fatal(err)
	}
	if n := w.Figures().Creates; n != 1 {
		t.Fatalf("%d creates seen after Sync, want 1", n)
	}
	if v := w.Violations("x"); len(v) != 0 {
		t.Fatalf("placement through the store: %v", v)
	}

	// A record written around shoal, without a slot, takes n1 over its
	// capacity.
	raw := func(name, uid string) {
		t.Helper()
		b, err := proto.Marshal(&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Workspace: store.DefaultWorkspace, Name: name, Uid: uid},
			Spec: &shoalv1.SandboxSpec{Node: "n1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, st.SandboxKey(store.DefaultWorkspace, name), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	raw("c", "uc")
	testenv.Eventually(t, 10*time.Second, "the raw record seen", func() bool { return len(w.Violations("x")) == 2 })
	for _, v := range w.Violations("x") {
		if v.Invariant != invCapacity {
			t.Fatalf("raw record: %v", v)
		}
	}

	// The node's keep-alive ends: its lease expires, and the watch says
	// when (etcd rounds a lease up to its minimum TTL, 2s by default).
	unregister()
	cut := time.Now()
	testenv.Eventually(t, 15*time.Second, "the lease expiry seen", func() bool {
		evs := w.Registry()["n1"]
		return len(evs) > 0 && !evs[len(evs)-1].Present
	})
	evs := w.Registry()["n1"]
	// Registered after the watch started: no initial event.
	if len(evs) != 2 || evs[0].Initial || !evs[0].Present || evs[1].Present {
		t.Fatalf("n1's registry events: %+v", evs)
	}
	if d := evs[1].At.Sub(cut); d < 500*time.Millisecond || d > 10*time.Second {
		t.Fatalf("expiry seen %s after the keep-alive stopped", d)
	}
	t.Logf("lease expiry seen %s after the keep-alive stopped", evs[1].At.Sub(cut).Round(time.Millisecond))

	// A sandbox placed on n1 now is placed on a node that is not Ready.
	raw("d", "ud")
	testenv.Eventually(t, 10*time.Second, "the dead placement seen", func() bool {
		v := w.Violations("x")
		return len(v) > 0 && v[len(v)-1].Invariant == invPlacedReady
	})
	if d := w.Violations("x"); !strings.Contains(d[len(d)-1].Detail, "default/d/ud") {
		t.Fatalf("dead placement: %v", d)
	}
}

// runContainer starts a container of the sandbox image on cli, labelled
// as shoal labels its own.
func runContainer(t *testing.T, cli *client.Client, node, uid string) string {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Labels: map[string]string{
		docker.LabelManaged: "true", docker.LabelNode: node, docker.LabelUID: uid}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func TestEngineSamplerAgainstEngines(t *testing.T) {
	t.Parallel()
	n1, n2 := randomID("es1-"), randomID("es2-")
	engines := testenv.StartEngines(t, n1, n2)
	clients := map[string]*client.Client{n1: engines[0].Client, n2: engines[1].Client}
	t.Cleanup(func() {
		// Private engines go with their containers; the shared one does not.
		for id, c := range clients {
			cs, _ := c.ContainerList(context.Background(), container.ListOptions{All: true,
				Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"="+id))})
			for _, x := range cs {
				_ = c.ContainerRemove(context.Background(), x.ID, container.RemoveOptions{Force: true})
			}
		}
	})
	s := NewEngineSampler(clients, "", 50*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	stop := func() { cancel(); wg.Wait() }
	defer stop()

	last := func(node string) NodeSample {
		tl := s.Timeline()[node]
		if len(tl) == 0 {
			return NodeSample{}
		}
		return tl[len(tl)-1]
	}
	uid := randomID("uid-")
	runContainer(t, engines[0].Client, n1, uid)
	testenv.Eventually(t, 20*time.Second, "n1's container seen running", func() bool { return last(n1).Running == 1 })
	if d := s.Duplicates(); len(d) != 0 {
		t.Fatalf("one container: %+v", d)
	}
	// A second copy of the uid on the other node's engine.
	second := runContainer(t, engines[1].Client, n2, uid)
	testenv.Eventually(t, 20*time.Second, "the double run seen", func() bool { return len(s.Duplicates()) == 1 })
	// Paused, it runs nothing: the stretch ends.
	if err := engines[1].Client.ContainerPause(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the pause seen", func() bool { l := last(n2); return l.Paused == 1 && l.Running == 0 })
	rounds := s.Duplicates()[0].Rounds
	stop()
	v := s.Violations("x")
	if len(v) != 1 || v[0].Invariant != invOneRunning || !strings.Contains(v[0].Detail, uid) {
		t.Fatalf("violations: %v", v)
	}
	if d := s.Duplicates()[0]; d.Rounds != rounds || len(d.Containers) != 2 {
		t.Fatalf("the stretch went on after the pause: %+v (had %d rounds)", d, rounds)
	}
	f := s.Figures()
	t.Logf("%d rounds, %d list errors, %s", f.Rounds, f.ListErrors, v[0].Detail)
	if f.ListErrors != 0 || f.MaxRunning < 2 {
		t.Fatalf("figures: %+v", f)
	}
}
