package hollow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"shoal"
)

// Config of a hollow runtime.
type Config struct {
	// Node is the node id its containers carry.
	Node string
	// Latency is added to every call that changes a container (create,
	// start, pause, unpause, removal) and to exec, as an engine's would be.
	Latency time.Duration
	// Capacity is what it reports as the most one container can have.
	Capacity shoal.EngineCapacity
}

// DefaultCapacity is reported unless Config.Capacity is set: a large
// host, so that no sandbox of a scale test is refused for its resources.
var DefaultCapacity = shoal.EngineCapacity{NCPU: 64, MemTotal: 256 << 30}

// Runtime simulates a container engine in memory. Its methods are safe
// for concurrent use.
type Runtime struct {
	cfg Config

	mu         sync.Mutex
	containers map[string]*ctr // by id
	// egress holds the simulated egress sidecars (egress.go), by the
	// sandbox's uid.
	egress map[string]shoal.EgressSidecar
	subs   map[chan shoal.ContainerEvent]struct{}
}

// ctr is one simulated container.
type ctr struct {
	shoal.Container
	env      []string
	cmd      []string
	files    map[string]map[string]string // credential files: provider → key → value
	running  bool
	paused   bool
	exitCode int
	started  time.Time
}

// New returns an empty hollow runtime.
func New(cfg Config) *Runtime {
	if cfg.Capacity.NCPU == 0 {
		cfg.Capacity = DefaultCapacity
	}
	return &Runtime{cfg: cfg, containers: map[string]*ctr{}, egress: map[string]shoal.EgressSidecar{}, subs: map[chan shoal.ContainerEvent]struct{}{}}
}

// wait is the simulated engine's latency (or ctx's end).
func (r *Runtime) wait(ctx context.Context) error {
	if r.cfg.Latency <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(r.cfg.Latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// exitOf is how a container's command ends: true and false at once (0 and
// 1), `exit N` (the last two words, as `sh -c "...; exit N"`) with N, and
// anything else (the sandbox image's agent) runs until it is removed.
func exitOf(cmd []string) (code int, exits bool) {
	if len(cmd) == 0 {
		return 0, false
	}
	words := strings.Fields(strings.Join(cmd, " "))
	switch last := words[len(words)-1]; {
	case last == "true":
		return 0, true
	case last == "false":
		return 1, true
	case len(words) >= 2 && words[len(words)-2] == "exit":
		if n, err := strconv.Atoi(last); err == nil && n >= 0 && n < 256 {
			return n, true
		}
	}
	return 0, false
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run creates and starts a container. A command that ends at once (see
// exitOf) is exited by the time Run returns, as Settle asks of an engine.
func (r *Runtime) Run(ctx context.Context, s shoal.ContainerSpec) (string, error) {
	if err := r.wait(ctx); err != nil {
		return "", err
	}
	c := &ctr{Container: shoal.Container{ID: newID(), UID: s.UID, Name: s.Name, Workspace: s.Workspace, Node: r.cfg.Node,
		State: "running", Created: time.Now()}, env: slices.Clone(s.Env), cmd: slices.Clone(s.Command), running: true, started: time.Now()}
	code, exits := exitOf(s.Command)
	r.mu.Lock()
	r.containers[c.ID] = c
	r.emitLocked(shoal.ContainerEvent{Action: "create", ID: c.ID, UID: c.UID})
	if s.Created {
		c.running, c.State, c.started = false, "created", time.Time{}
		r.mu.Unlock()
		return c.ID, nil
	}
	r.emitLocked(shoal.ContainerEvent{Action: "start", ID: c.ID, UID: c.UID})
	if exits {
		c.running, c.State, c.exitCode = false, "exited", code
		r.emitLocked(shoal.ContainerEvent{Action: "die", ID: c.ID, UID: c.UID, ExitCode: strconv.Itoa(code)})
	}
	r.mu.Unlock()
	return c.ID, nil
}

// emitLocked sends e to every subscriber that has room (r.mu held); a
// subscriber that falls behind misses events, as with an engine's stream,
// and the agent's resync covers it.
func (r *Runtime) emitLocked(e shoal.ContainerEvent) {
	for ch := range r.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

// RemoveContainer removes one container; a missing one is no error.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(id)
	return nil
}

func (r *Runtime) removeLocked(id string) {
	c, ok := r.containers[id]
	if !ok {
		return
	}
	delete(r.containers, id)
	if c.running {
		r.emitLocked(shoal.ContainerEvent{Action: "die", ID: id, UID: c.UID, ExitCode: "137"})
	}
	r.emitLocked(shoal.ContainerEvent{Action: "destroy", ID: id, UID: c.UID})
}

// Remove removes every container of a sandbox uid, and its egress
// sidecar, as docker's does.
func (r *Runtime) Remove(ctx context.Context, uid string) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range r.containers {
		if c.UID == uid {
			r.removeLocked(id)
		}
	}
	delete(r.egress, uid)
	return nil
}

// List reports every container.
func (r *Runtime) List(context.Context) ([]shoal.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]shoal.Container, 0, len(r.containers))
	for _, c := range r.containers {
		out = append(out, c.Container)
	}
	slices.SortFunc(out, func(a, b shoal.Container) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Inspect reports a container's state; a missing one is Exists false.
func (r *Runtime) Inspect(_ context.Context, id string) (shoal.ContainerState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return shoal.ContainerState{}, nil
	}
	return shoal.ContainerState{Exists: true, Running: c.running, Paused: c.paused, Status: c.State, ExitCode: c.exitCode, StartedAt: c.started}, nil
}

// WriteCredentialFiles keeps the files in memory, as a container's tmpfs
// would; a container that is not running refuses them.
func (r *Runtime) WriteCredentialFiles(ctx context.Context, id string, files map[string]map[string]string) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok || !c.running {
		return shoal.FailedPrecondition("container %s is not running", id)
	}
	c.files = files
	return nil
}

// Events streams container events until ctx ends.
func (r *Runtime) Events(ctx context.Context) (<-chan shoal.ContainerEvent, <-chan error) {
	in := make(chan shoal.ContainerEvent, 256)
	out := make(chan shoal.ContainerEvent, 256)
	errs := make(chan error)
	r.mu.Lock()
	r.subs[in] = struct{}{}
	r.mu.Unlock()
	go func() {
		defer close(out)
		defer close(errs)
		defer func() {
			r.mu.Lock()
			delete(r.subs, in)
			r.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-in:
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, errs
}

// Pause freezes a running container; others are left as they are.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, true)
}

// Unpause thaws a paused container; others are left as they are.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, false)
}

// Stop ends a running (or paused) container's process as docker stop
// does when the process obeys SIGTERM: exit code 143. The grace is not
// simulated.
func (r *Runtime) Stop(ctx context.Context, id string, _ time.Duration) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return shoal.NotFound("container %s not found", id)
	}
	if !c.running {
		return nil
	}
	c.running, c.paused, c.State, c.exitCode = false, false, "exited", 143
	r.emitLocked(shoal.ContainerEvent{Action: "die", ID: id, UID: c.UID, ExitCode: "143"})
	return nil
}

// Start starts an exited container again, with the command it was made
// with (one that ends at once has ended by the time Start returns).
func (r *Runtime) Start(ctx context.Context, id string, _ time.Duration) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return shoal.NotFound("container %s not found", id)
	}
	if c.running {
		return nil
	}
	c.running, c.State, c.started = true, "running", time.Now()
	r.emitLocked(shoal.ContainerEvent{Action: "start", ID: id, UID: c.UID})
	if code, exits := exitOf(c.cmd); exits {
		c.running, c.State, c.exitCode = false, "exited", code
		r.emitLocked(shoal.ContainerEvent{Action: "die", ID: id, UID: c.UID, ExitCode: strconv.Itoa(code)})
	}
	return nil
}

// Refresh gives a stopped container the environment s.Env: the same one
// when it has it, else a new stopped container (a new id) with the old
// one's command and files, as the Docker runtime's commit and create.
// The old one stays until it is removed.
func (r *Runtime) Refresh(ctx context.Context, id string, s shoal.ContainerSpec) (string, error) {
	if err := r.wait(ctx); err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return "", shoal.NotFound("container %s not found", id)
	}
	if c.running || slices.Equal(c.env, s.Env) {
		return id, nil
	}
	for oid, o := range r.containers {
		if oid != id && o.UID == c.UID {
			r.removeLocked(oid) // a refresh cut short earlier
		}
	}
	n := &ctr{Container: c.Container, env: slices.Clone(s.Env), cmd: slices.Clone(c.cmd), exitCode: c.exitCode}
	n.ID, n.Created, n.State = newID(), time.Now(), "exited"
	r.containers[n.ID] = n
	r.emitLocked(shoal.ContainerEvent{Action: "create", ID: n.ID, UID: n.UID})
	return n.ID, nil
}

// ReapExecs has nothing to do: a simulated exec ends with the process
// that serves it.
func (r *Runtime) ReapExecs(context.Context, string) ([]shoal.ReapedExec, error) { return nil, nil }

func (r *Runtime) setPaused(ctx context.Context, id string, paused bool) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok || !c.running || c.paused == paused {
		return nil
	}
	c.paused = paused
	action := "unpause"
	c.State = "running"
	if paused {
		action, c.State = "pause", "paused"
	}
	r.emitLocked(shoal.ContainerEvent{Action: action, ID: id, UID: c.UID})
	return nil
}

// Kill ends a running container's process with code, as if it had died
// (the agent sees a die event and reports STOPPED).
func (r *Runtime) Kill(id string, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok || !c.running {
		return
	}
	c.running, c.paused, c.State, c.exitCode = false, false, "exited", code
	r.emitLocked(shoal.ContainerEvent{Action: "die", ID: id, UID: c.UID, ExitCode: strconv.Itoa(code)})
}

// Exec runs one of the commands a hollow container knows: true (0), false
// (1) and env (its whole environment on stdout, 0; its arguments are not
// read); anything else is 127 with a line on stderr, as a shell says of a
// missing command. The spec's other fields are not simulated.
func (r *Runtime) Exec(ctx context.Context, id string, spec shoal.ExecSpec, stdout, stderr io.Writer) (shoal.ExecResult, error) {
	if spec.Stdin != nil {
		defer spec.Stdin.Close()
	}
	code, err := r.exec(ctx, id, spec.Command, stdout, stderr)
	return shoal.ExecResult{ExitCode: code}, err
}

func (r *Runtime) exec(ctx context.Context, id string, cmd []string, stdout, stderr io.Writer) (int, error) {
	if err := r.wait(ctx); err != nil {
		return 0, err
	}
	r.mu.Lock()
	c, ok := r.containers[id]
	var env []string
	running, paused := false, false
	if ok {
		env, running, paused = c.env, c.running, c.paused
	}
	r.mu.Unlock()
	switch {
	case !ok || !running:
		return 0, shoal.FailedPrecondition("container is not running: container %s is not running", id[:min(12, len(id))])
	case paused:
		return 0, shoal.FailedPrecondition("container is not running: container %s is paused, unpause the container before exec", id[:min(12, len(id))])
	case len(cmd) == 0:
		return 0, shoal.Invalid("command", "is empty")
	}
	switch cmd[0] {
	case "true":
		return 0, nil
	case "false":
		return 1, nil
	case "env":
		for _, e := range env {
			if _, err := fmt.Fprintln(stdout, e); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	fmt.Fprintf(stderr, "hollow: %s: not found (a hollow container runs only true, false and env)\n", cmd[0])
	return 127, nil
}

// Logs writes one line and returns, follow or not: a hollow container has
// no process output.
func (r *Runtime) Logs(_ context.Context, id string, _ bool, _ int, stdout, _ io.Writer) error {
	r.mu.Lock()
	_, ok := r.containers[id]
	r.mu.Unlock()
	if !ok {
		return shoal.NotFound("container %s not found", id[:min(12, len(id))])
	}
	_, err := fmt.Fprintf(stdout, "hollow container %s on node %s\n", id[:12], r.cfg.Node)
	return err
}

// errNoFiles: a hollow container has no filesystem to copy to or from.
var errNoFiles = shoal.FailedPrecondition("a hollow container has no filesystem: sandbox cp needs a node with a container engine")

// StatPath refuses: a hollow container has no files.
func (r *Runtime) StatPath(context.Context, string, string) (shoal.PathStat, error) {
	return shoal.PathStat{}, errNoFiles
}

// CopyTo refuses: a hollow container has no files.
func (r *Runtime) CopyTo(context.Context, string, string, io.Reader) error { return errNoFiles }

// CopyFrom refuses: a hollow container has no files.
func (r *Runtime) CopyFrom(context.Context, string, string) (io.ReadCloser, shoal.PathStat, error) {
	return nil, shoal.PathStat{}, errNoFiles
}

// HasImage is true for every image: a hollow runtime runs none.
func (r *Runtime) HasImage(context.Context, string) (bool, error) { return true, nil }

// Capacity is the configured capacity.
func (r *Runtime) Capacity(context.Context) (shoal.EngineCapacity, error) { return r.cfg.Capacity, nil }

// Close is a no-op: nothing outlives the process.
func (r *Runtime) Close() error { return nil }

// Ping answers at once: a hollow engine is always there.
func (r *Runtime) Ping(context.Context) error { return nil }

// Host names the hollow engine.
func (r *Runtime) Host() string { return "hollow://" + r.cfg.Node }
