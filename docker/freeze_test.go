package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"shoal"
	"shoal/docker"
	"shoal/internal/testenv"
)

// A freeze that lands while execs are starting in the container must
// neither wedge the engine nor the exec: every pause and unpause
// completes, and every exec either ran or was refused because the
// container was frozen. Without the runtime's freeze guard a pause that
// lands inside `runc exec` leaves runc waiting on the frozen cgroup and the
// engine's next unpause of the container hanging (the cluster chaos runs'
// container that stayed paused). A private engine, as the chaos hosts':
// the hang was seen there.
func TestFreezeWhileExecsStart(t *testing.T) {
	e := testenv.StartEngine(t, "freeze")
	node := nodeID()
	r, err := docker.New(context.Background(), docker.Config{Host: "unix://" + e.Socket(), Node: node, Cluster: "ffff"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	s := spec("fr")
	id, err := r.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Remove(cctx, s.UID); err != nil {
			t.Errorf("remove the container: %v", err)
		}
	})

	const rounds, execers = 40, 4
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	var ran, refused, other sync.Map
	var wg sync.WaitGroup
	t.Cleanup(func() { halt(); wg.Wait() }) // before the container's removal
	for w := range execers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				xctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := r.Exec(xctx, id, shoal.ExecSpec{Command: []string{"true"}}, io.Discard, io.Discard)
				cancel()
				key := [2]int{w, i}
				switch {
				case err == nil && res.ExitCode == 0:
					ran.Store(key, true)
				case errors.Is(err, shoal.ErrUnavailable):
					refused.Store(key, true)
				default:
					other.Store(key, err)
				}
			}
		})
	}
	step := func(what string, f func(context.Context, string) error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := f(sctx, id); err != nil {
			t.Fatalf("%s while execs start: %v (a %s that does not complete is the wedged engine)", what, err, what)
		}
	}
	// The engine records a pause's state from containerd's events too; a
	// round starts once it shows the last one (else a late event makes
	// the engine take a running container for paused, or the reverse).
	settled := func(paused bool) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("the engine shows the container paused=%v", paused), func() error {
			st, err := r.Inspect(ctx, id)
			if err == nil && st.Paused != paused {
				err = fmt.Errorf("inspect: paused=%v", st.Paused)
			}
			return err
		})
	}
	for range rounds {
		step("pause", r.Pause)
		settled(true)
		step("unpause", r.Unpause)
		settled(false)
	}
	halt()
	wg.Wait()
	n := func(m *sync.Map) (c int) {
		m.Range(func(any, any) bool { c++; return true })
		return c
	}
	other.Range(func(k, v any) bool {
		t.Errorf("exec %v: %v (want it run, or refused as Unavailable while frozen)", k, v)
		return true
	})
	if n(&ran) == 0 {
		t.Fatalf("no exec ran between %d freezes (refused %d)", rounds, n(&refused))
	}
	t.Logf("%d pause/unpause rounds: %d execs ran, %d refused while frozen", rounds, n(&ran), n(&refused))
	// After it all the container runs and takes execs.
	if res, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"true"}}, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the freezes: %+v %v", res, err)
	}
	if st, err := r.Inspect(ctx, id); err != nil || !st.Running || st.Paused {
		t.Fatalf("container after the freezes: %+v %v; want running, not paused", st, err)
	}
}
