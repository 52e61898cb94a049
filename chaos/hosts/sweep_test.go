package hosts_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"shoal/chaos/hosts"
	"shoal/internal/testenv"
)

// envChild makes the test binary a run that dies: it starts one voter,
// prints "RUN <id> <dir>" and waits to be killed.
const envChild = "SHOAL_HOSTS_TEST_CHILD"

// A run killed with SIGKILL leaves its node container, network and
// directory behind; the next Start removes them. Both runs share the
// system engine: private engines a dead run leaves are engine.SweepStale's,
// and only once they are a minute old.
func TestSweepDeadRun(t *testing.T) {
	if os.Getenv(envChild) == "1" {
		deadRun()
		return
	}
	sys := testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSweepDeadRun$", "-test.v")
	child.Env = append(os.Environ(), envChild+"=1", "SHOAL_BIN="+bin)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var run, dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "RUN" {
			run, dir = f[1], f[2]
			break
		}
	}
	child.Process.Kill()
	child.Wait()
	if run == "" {
		t.Fatal("the child run printed no RUN line")
	}
	labelled := filters.NewArgs(filters.Arg("label", hosts.LabelRun+"="+run))
	if cs, _ := sys.ContainerList(ctx, container.ListOptions{All: true, Filters: labelled}); len(cs) == 0 {
		t.Fatalf("the killed run %s left no node container: nothing to sweep", run)
	}

	cfg := hosts.DefaultConfig(bin)
	cfg.Voters = 1
	cfg.SharedEngine = true
	cfg.Logf = t.Logf
	c, err := hosts.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAndCheck(t, sys, c) })
	if cs, err := sys.ContainerList(ctx, container.ListOptions{All: true, Filters: labelled}); err != nil || len(cs) != 0 {
		t.Errorf("after the next Start: %d node containers of the dead run left (%v)", len(cs), err)
	}
	if ns, err := sys.NetworkList(ctx, network.ListOptions{Filters: labelled}); err != nil || len(ns) != 0 {
		t.Errorf("after the next Start: %d networks of the dead run left (%v)", len(ns), err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the next Start: the dead run's %s is still there (%v)", dir, err)
	}
}

// deadRun is the child of TestSweepDeadRun.
func deadRun() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := hosts.DefaultConfig(os.Getenv("SHOAL_BIN"))
	cfg.Voters = 1
	cfg.SharedEngine = true
	c, err := hosts.Start(ctx, cfg)
	if err != nil {
		os.Stderr.WriteString("child run: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("RUN " + c.Run() + " " + c.Dir() + "\n")
	<-ctx.Done() // killed long before
	os.Exit(1)
}
