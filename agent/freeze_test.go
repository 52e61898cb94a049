package agent_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

// heldRemovals is the real runtime, except that its removals wait until
// the test lets them go (as a force-remove of a frozen container on a
// busy engine can), and that it notes, when the first RemoveContainer (the
// rejoin's) begins, whether the container the test watches was still
// frozen. (Remove, a teardown's, is held too, so that a teardown does not
// take the container away before the rejoin gets to it.)
type heldRemovals struct {
	*docker.Runtime
	release chan struct{}
	watch   atomic.Pointer[string]

	once            sync.Once
	began           chan struct{}
	frozenAtRemoval bool
}

func (h *heldRemovals) RemoveContainer(ctx context.Context, id string) error {
	watch := h.watch.Load()
	if watch == nil { // not yet set up: not a removal this test holds
		return h.Runtime.RemoveContainer(ctx, id)
	}
	h.once.Do(func() {
		st, err := h.Runtime.Inspect(ctx, *watch)
		h.frozenAtRemoval = err != nil || st.Paused
		close(h.began)
	})
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Runtime.RemoveContainer(ctx, id)
}

func (h *heldRemovals) Remove(ctx context.Context, uid string) error {
	if h.watch.Load() != nil {
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Runtime.Remove(ctx, uid)
}

// A node that holds its lease again thaws the containers of its live
// sandboxes before it removes those of sandboxes deleted meanwhile: a
// removal that is slow (or hangs until the step's timeout) does not keep
// sandboxes that are meant to run frozen behind it.
func TestRejoinThawsBeforeItRemoves(t *testing.T) {
	testenv.RequireDocker(t)
	cli, _ := testenv.Etcd(t)
	st := store.New(cli, store.Options{})
	node := fmt.Sprintf("rj%x", time.Now().UnixNano())[:14]
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{Node: node, Cluster: "agenttest"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	hr := &heldRemovals{Runtime: rt, release: make(chan struct{}), began: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hr.release) }) }
	defer release()
	reg := register(ctx, t, st, cli, node)
	lease := &cuttableLease{Lease: reg}
	defer run(ctx, t, reg, agent.Config{Node: node, Store: st, Runtime: hr, Lease: lease, Resync: time.Hour})()

	// One after the other, so that the doomed sandbox's container is the
	// newer and listed first (the engine lists newest first): a single
	// pass would remove it before it thaws the live one.
	containers := map[string]string{} // sandbox name → container id
	for _, name := range []string{"live", "doomed"} {
		if _, err := st.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name},
			Spec: &shoalv1.SandboxSpec{Image: docker.DefaultImage}, Status: &shoalv1.SandboxStatus{Node: node}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, name+" READY", func() (bool, error) {
			sb, err := st.GetSandbox(ctx, "default", name)
			if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
				return false, err
			}
			containers[name] = sb.Status.ContainerId
			return true, nil
		})
	}
	cs, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != containers["doomed"] {
		t.Fatalf("the engine lists %v; the test needs the doomed sandbox's container %s first", cs, containers["doomed"])
	}
	live := containers["live"]
	hr.watch.Store(&live)

	lease.cut.Store(true)
	testenv.Eventually(t, time.Minute, "both containers frozen", func() (bool, error) {
		for _, id := range containers {
			s, err := rt.Inspect(ctx, id)
			if err != nil || !s.Paused {
				return false, err
			}
		}
		return true, nil
	})
	if _, err := st.MarkSandboxDeleting(ctx, "default", "doomed", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	lease.cut.Store(false)

	select {
	case <-hr.began:
	case <-ctx.Done():
		t.Fatal("the rejoin never removed the deleted sandbox's container")
	}
	if hr.frozenAtRemoval {
		t.Error("the first removal began while the live sandbox's container was still frozen")
	}
	testenv.Eventually(t, time.Minute, "the live sandbox's container running while a removal is held", func() (bool, error) {
		s, err := rt.Inspect(ctx, containers["live"])
		return err == nil && s.Running && !s.Paused, err
	})
	release()
	testenv.Eventually(t, time.Minute, "the deleted sandbox's container gone", func() (bool, error) {
		s, err := rt.Inspect(ctx, containers["doomed"])
		return err == nil && !s.Exists, err
	})
}
