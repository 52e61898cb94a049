package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"shoal"
)

// Labels on shoal's containers.
const (
	LabelManaged   = "shoal.dev/managed"
	LabelUID       = "shoal.dev/uid"
	LabelName      = "shoal.dev/name"
	LabelWorkspace = "shoal.dev/workspace"
	LabelNode      = "shoal.dev/node"
)

// DefaultImage is the sandbox image built by `make image`.
const DefaultImage = "shoal/sandbox:dev"

// Runtime talks to one Docker engine on behalf of one node.
type Runtime struct {
	cli  *client.Client
	node string
	log  *slog.Logger
}

// Config of a Runtime.
type Config struct {
	// Host is the engine address (unix:///var/run/docker.sock); empty means
	// DOCKER_HOST or the default socket.
	Host string
	// Node is this node's id, written to every container's labels.
	Node   string
	Logger *slog.Logger
}

// ErrNoEngine means no Docker engine answered.
var ErrNoEngine = errors.New("no Docker engine is reachable")

// New connects to the engine and checks that it answers.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cli: cli, node: cfg.Node, log: cfg.Logger.With("subsystem", "docker")}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w at %s: %v", ErrNoEngine, cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersion(pctx)
	return r, nil
}

// Close releases the client.
func (r *Runtime) Close() error { return r.cli.Close() }

// Node is the node id this runtime labels containers with.
func (r *Runtime) Node() string { return r.node }

// Spec is what a sandbox container needs.
type Spec struct {
	UID, Name, Workspace string
	Image                string
	Command              []string
	Env                  []string
	CPUMillis            int64
	MemoryBytes          int64
}

// ContainerName is the Docker name of a sandbox's container.
func ContainerName(ws, name, uid string) string {
	return fmt.Sprintf("shoal-%s-%s-%s", ws, name, uid[:min(8, len(uid))])
}

// Run creates and starts a sandbox container and returns its id. A
// container of the same uid that exists already is reused (started if
// needed), so Run is idempotent.
func (r *Runtime) Run(ctx context.Context, s Spec) (string, error) {
	if existing, err := r.byUID(ctx, s.UID); err != nil {
		return "", err
	} else if len(existing) > 0 {
		c := existing[0]
		if c.State != "running" {
			if err := r.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				return c.ID, fmt.Errorf("start container %s: %w", c.ID[:12], err)
			}
		}
		return c.ID, nil
	}
	cfg := &container.Config{
		Image: s.Image,
		Cmd:   s.Command,
		Env:   s.Env,
		Labels: map[string]string{
			LabelManaged: "true", LabelUID: s.UID, LabelName: s.Name,
			LabelWorkspace: s.Workspace, LabelNode: r.node,
		},
	}
	host := &container.HostConfig{
		Resources: container.Resources{NanoCPUs: s.CPUMillis * 1_000_000, Memory: s.MemoryBytes},
		// No network beyond the container's own: sandboxes reach only what
		// the operator wires up.
		NetworkMode: "none",
	}
	resp, err := r.cli.ContainerCreate(ctx, cfg, host, nil, nil, ContainerName(s.Workspace, s.Name, s.UID))
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", shoal.FailedPrecondition("image %q is not present on this node's Docker engine (nothing can be pulled here); build it with `make image`", s.Image)
		}
		return "", fmt.Errorf("create container: %w", err)
	}
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return resp.ID, fmt.Errorf("start container %s: %w", resp.ID[:12], err)
	}
	return resp.ID, nil
}

// Remove force-removes every container of a sandbox uid. Removing what is
// already gone is success.
func (r *Runtime) Remove(ctx context.Context, uid string) error {
	cs, err := r.byUID(ctx, uid)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := r.RemoveContainer(ctx, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// RemoveContainer force-removes one container; gone is success.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	err := r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is already in progress") {
		return fmt.Errorf("remove container %s: %w", id[:min(12, len(id))], err)
	}
	return nil
}

// Container is what the runtime reports of one container.
type Container struct {
	ID, UID, Name, Workspace, Node string
	State                          string // created, running, exited, ...
	Created                        time.Time
}

// List returns this node's shoal containers (all states).
func (r *Runtime) List(ctx context.Context) ([]Container, error) {
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelNode+"="+r.node))
	return r.list(ctx, f)
}

func (r *Runtime) byUID(ctx context.Context, uid string) ([]Container, error) {
	return r.list(ctx, filters.NewArgs(filters.Arg("label", LabelUID+"="+uid)))
}

func (r *Runtime) list(ctx context.Context, f filters.Args) ([]Container, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]Container, 0, len(cs))
	for _, c := range cs {
		out = append(out, Container{
			ID: c.ID, UID: c.Labels[LabelUID], Name: c.Labels[LabelName],
			Workspace: c.Labels[LabelWorkspace], Node: c.Labels[LabelNode],
			State: string(c.State), Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

// State of one container.
type State struct {
	Exists   bool
	Running  bool
	Status   string
	ExitCode int
	OOM      bool
	Error    string
}

// Inspect reports a container's state; a missing container is
// State{Exists: false} and no error.
func (r *Runtime) Inspect(ctx context.Context, id string) (State, error) {
	ci, err := r.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("inspect container: %w", err)
	}
	st := ci.State
	return State{Exists: true, Running: st.Running, Status: string(st.Status), ExitCode: st.ExitCode, OOM: st.OOMKilled, Error: st.Error}, nil
}

// Exec runs cmd in the container, copying its output to stdout and stderr
// as it is produced, and returns its exit code.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, stdin []byte, stdout, stderr io.Writer) (int, error) {
	ex, err := r.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true, AttachStdin: len(stdin) > 0,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return 0, shoal.FailedPrecondition("container is not running: %v", err)
		}
		return 0, fmt.Errorf("exec create: %w", err)
	}
	att, err := r.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, fmt.Errorf("exec attach: %w", err)
	}
	defer att.Close()
	if len(stdin) > 0 {
		go func() {
			// Owned by att: closing the connection ends the copy.
			_, _ = att.Conn.Write(stdin)
			_ = att.CloseWrite()
		}()
	}
	if _, err := stdcopy.StdCopy(stdout, stderr, att.Reader); err != nil {
		return 0, fmt.Errorf("exec output: %w", err)
	}
	ins, err := r.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return 0, fmt.Errorf("exec inspect: %w", err)
	}
	return ins.ExitCode, nil
}

// Logs copies the container's output to stdout and stderr until it ends
// (or, with follow, until ctx ends).
func (r *Runtime) Logs(ctx context.Context, id string, follow bool, tail int, stdout, stderr io.Writer) error {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow}
	if tail > 0 {
		opts.Tail = fmt.Sprint(tail)
	}
	rc, err := r.cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return shoal.FailedPrecondition("the sandbox's container is gone")
		}
		return fmt.Errorf("logs: %w", err)
	}
	defer rc.Close()
	_, err = stdcopy.StdCopy(stdout, stderr, rc)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// Event is a container lifecycle event of one of this node's containers.
type Event struct {
	Action   string // start, die, destroy, oom, stop, ...
	ID       string
	UID      string
	ExitCode string
}

// Events streams container events of this node's shoal containers until ctx
// ends or the stream breaks (the error is sent, then both channels close).
func (r *Runtime) Events(ctx context.Context) (<-chan Event, <-chan error) {
	f := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelNode+"="+r.node),
	)
	msgs, errs := r.cli.Events(ctx, events.ListOptions{Filters: f})
	out := make(chan Event, 64)
	outErr := make(chan error, 1)
	go func() {
		defer close(out)
		defer close(outErr)
		for {
			select {
			case m := <-msgs:
				e := Event{Action: string(m.Action), ID: m.Actor.ID, UID: m.Actor.Attributes[LabelUID], ExitCode: m.Actor.Attributes["exitCode"]}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			case err := <-errs:
				if ctx.Err() == nil {
					outErr <- err
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, outErr
}

// HasImage reports whether the engine has an image.
func (r *Runtime) HasImage(ctx context.Context, ref string) (bool, error) {
	_, err := r.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
