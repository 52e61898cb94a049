package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"shoal/docker"
)

// Labels on everything a run makes on the system engine (node containers,
// networks) and on the node image.
const (
	// LabelRun is the run's id.
	LabelRun = "shoal.dev/hosts-run"
	// LabelNode is the node id of a node container.
	LabelNode = "shoal.dev/hosts-node"
	// LabelLock is the run's directory, locked (flock) while the run
	// lives: unlocked or gone, the run is dead and its leftovers are
	// removed by the next Start.
	LabelLock = "shoal.dev/hosts-lock"
	// LabelRemoveDir is set (to the run's directory) when Close would
	// have removed that directory.
	LabelRemoveDir = "shoal.dev/hosts-remove-dir"
	// LabelBinary is the sha256 of the binary in a node image.
	LabelBinary = "shoal.dev/hosts-binary"
)

// lockDir takes the run's lock: an exclusive flock on its directory, held
// until the returned file is closed or the process ends.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("hosts: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("hosts: lock %s: %w (is another run using it?)", dir, err)
	}
	return f, nil
}

// leftovers are what one dead run left on the system engine.
type leftovers struct {
	lock, removeDir string
	nodes           []string
	containers      []string
	networks        []string
}

// sweepStale removes what runs that died without Close left: their node
// containers, their sandbox containers on the system engine (shared
// engines), their networks and their directories (when Close would have
// removed them). A run whose lock is held is alive and left alone. Private
// engines are swept by engine.SweepStale.
func sweepStale(ctx context.Context, sys *client.Client, logf func(string, ...any)) error {
	runs := map[string]*leftovers{}
	run := func(labels map[string]string) *leftovers {
		id := labels[LabelRun]
		r := runs[id]
		if r == nil {
			r = &leftovers{}
			runs[id] = r
		}
		r.lock = labels[LabelLock]
		if d := labels[LabelRemoveDir]; d != "" {
			r.removeDir = d
		}
		return r
	}
	cs, err := sys.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelRun))})
	if err != nil {
		return fmt.Errorf("hosts: list the node containers of earlier runs: %w", err)
	}
	for _, c := range cs {
		r := run(c.Labels)
		r.containers = append(r.containers, c.ID)
		if n := c.Labels[LabelNode]; n != "" {
			r.nodes = append(r.nodes, n)
		}
	}
	ns, err := sys.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelRun))})
	if err != nil {
		return fmt.Errorf("hosts: list the networks of earlier runs: %w", err)
	}
	for _, n := range ns {
		run(n.Labels).networks = append(run(n.Labels).networks, n.ID)
	}
	var errs []error
	for id, r := range runs {
		lock, stale := staleLock(r.lock)
		if !stale {
			continue
		}
		logf("hosts: removing the leftovers of the dead run %s: %d node containers, %d networks", id, len(r.containers), len(r.networks))
		for _, c := range r.containers {
			if err := sys.ContainerRemove(ctx, c, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("hosts: remove node container %.12s of run %s: %w", c, id, err))
			}
		}
		for _, n := range r.nodes {
			if err := removeLabelled(ctx, sys, docker.LabelNode+"="+n); err != nil {
				errs = append(errs, err)
			}
		}
		for _, n := range r.networks {
			if err := sys.NetworkRemove(ctx, n); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("hosts: remove network %.12s of run %s: %w", n, id, err))
			}
		}
		if r.removeDir != "" {
			if err := os.RemoveAll(r.removeDir); err != nil {
				errs = append(errs, fmt.Errorf("hosts: remove %s of run %s: %w", r.removeDir, id, err))
			}
		}
		if lock != nil {
			lock.Close()
		}
	}
	return errors.Join(errs...)
}

// staleLock reports whether the run whose lock is path is dead: its
// directory is gone, or nobody holds its lock (which it then holds, for
// the caller to close once the leftovers are gone).
func staleLock(path string) (*os.File, bool) {
	if path == "" {
		return nil, true
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, true
	}
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// removeLabelled removes the system engine's containers with label.
func removeLabelled(ctx context.Context, cli *client.Client, label string) error {
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return fmt.Errorf("hosts: list containers labelled %s: %w", label, err)
	}
	var errs []error
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("hosts: remove container %.12s (%s): %w", c.ID, label, err))
		}
	}
	return errors.Join(errs...)
}
