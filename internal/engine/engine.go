package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"shoal/docker"
	"shoal/internal/proc"
)

// Engine is the Docker engine of one host: a private dockerd, or the
// system engine when Shared.
type Engine struct {
	Name string
	// Host is the engine's address in DOCKER_HOST form; empty means the
	// system engine (DOCKER_HOST or the default socket).
	Host string
	// Shared is true when this is the system engine, which other hosts
	// (and everything else on the machine) also use.
	Shared bool
	// Client talks to this engine; Close closes it.
	Client *client.Client

	images     []string // loaded from the system engine; removed by Close
	dir        string   // private engines only
	containerd string   // the containerd socket it shares
	lock       *os.File
	procMu     sync.Mutex
	proc       *proc.Process // the running (or last) dockerd
	closeOnce  sync.Once
	closeErr   error
}

// Environment variables that choose the engines.
const (
	// EnvSharedEngine=1 makes Unsupported refuse private engines, so
	// that every host uses the system engine.
	EnvSharedEngine = "SHOAL_SHARED_ENGINE"
	// EnvContainerd names the containerd socket the private engines
	// share (default: the first of containerdSockets that answers).
	EnvContainerd = "SHOAL_CONTAINERD"
)

// Root and Prefix place every private engine's directory (Root/PrefixXXXX).
// Root is short on purpose: the engine's API socket lives there and a unix
// socket path has at most 107 bytes.
const (
	Root   = "/tmp"
	Prefix = "shoal-eng-"
)

// containerdSockets are where a containerd usually listens: the system
// service, and the one the Docker engine starts for itself.
var containerdSockets = []string{
	"/run/containerd/containerd.sock",
	"/var/run/docker/containerd/containerd.sock",
}

// Options of Start.
type Options struct {
	// Images are copied from the system engine into each new engine
	// (default: the sandbox image, docker.DefaultImage).
	Images []string
	// Timeout bounds one engine's start, image load included (default
	// 60s).
	Timeout time.Duration
}

// Unsupported says why private engines cannot run here, or "".
func Unsupported() string {
	if os.Getenv(EnvSharedEngine) == "1" {
		return EnvSharedEngine + "=1"
	}
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		return "dockerd is not installed"
	}
	if _, err := containerdSocket(); err != nil {
		return err.Error()
	}
	return ""
}

func containerdSocket() (string, error) {
	cands := containerdSockets
	if s := os.Getenv(EnvContainerd); s != "" {
		cands = []string{s}
	}
	for _, s := range cands {
		c, err := net.DialTimeout("unix", s, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
	}
	return "", fmt.Errorf("no containerd answers on %s (set %s)", strings.Join(cands, " or "), EnvContainerd)
}

// System is the system engine (DOCKER_HOST, or the default socket) under
// name, Shared. Close closes only its client.
func System(name string) (*Engine, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client for the system engine: %w", err)
	}
	return &Engine{Name: name, Shared: true, Client: cli}, nil
}

// Start starts one private engine per name, at once, with opts.Images
// copied from the system engine sys. On error every engine it started is
// closed again and the error names the engine that failed.
func Start(ctx context.Context, sys *client.Client, opts Options, names ...string) ([]*Engine, error) {
	if len(opts.Images) == 0 {
		opts.Images = []string{docker.DefaultImage}
	}
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	tar, err := saveImages(ctx, sys, opts.Images)
	if err != nil {
		return nil, err
	}
	ctrd, err := containerdSocket()
	if err != nil {
		return nil, err
	}
	engines := make([]*Engine, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { engines[i], errs[i] = start(ctx, name, ctrd, opts, tar) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, e := range engines {
			if e != nil {
				e.Close(context.Background())
			}
		}
		return nil, err
	}
	return engines, nil
}

var (
	imagesMu  sync.Mutex
	imageTars = map[string][]byte{} // by the sorted, joined image names
)

// saveImages is `docker save` of images from the system engine, read once
// per process and set of images.
func saveImages(ctx context.Context, sys *client.Client, images []string) ([]byte, error) {
	key := slices.Clone(images)
	slices.Sort(key)
	k := strings.Join(key, ",")
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if tar, ok := imageTars[k]; ok {
		return tar, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rc, err := sys.ImageSave(ctx, images)
	if err != nil {
		return nil, fmt.Errorf("save %s from the system engine: %w", k, err)
	}
	defer rc.Close()
	tar, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("save %s from the system engine: %w", k, err)
	}
	imageTars[k] = tar
	return tar, nil
}

// start starts one dockerd and waits until it serves with the images
// loaded. On error, whatever it started is stopped again.
func start(ctx context.Context, name, containerd string, opts Options, tar []byte) (e *Engine, err error) {
	dir, err := os.MkdirTemp(Root, Prefix)
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", name, err)
	}
	// The lock says "in use" to SweepStale of other processes; it is
	// released when this process ends, however it ends.
	lock, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("engine %s: lock %s: %w", name, dir, err)
	}
	e = &Engine{Name: name, dir: dir, lock: lock, images: opts.Images, containerd: containerd,
		Host: "unix://" + filepath.Join(dir, "run", "docker.sock")}
	defer func() {
		if err != nil {
			e.teardown()
			e = nil
		}
	}()
	if err := os.Mkdir(e.SocketDir(), 0o700); err != nil {
		return e, fmt.Errorf("engine %s: %w", name, err)
	}
	// An empty config file: the host's /etc/docker/daemon.json (data root,
	// storage driver, log driver) is not this engine's.
	cfgFile := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(cfgFile, []byte("{}\n"), 0o600); err != nil {
		return e, fmt.Errorf("engine %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := e.launch(ctx); err != nil {
		return e, err
	}
	if err := loadImages(ctx, e.Client, tar, opts.Images); err != nil {
		return e, fmt.Errorf("engine %s: %w", name, err)
	}
	return e, nil
}

// launch starts the engine's dockerd and waits until it answers.
func (e *Engine) launch(ctx context.Context) (err error) {
	name, dir := e.Name, e.dir
	cfgFile := filepath.Join(dir, "daemon.json")
	logf, err := os.OpenFile(e.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("engine %s: %w", name, err)
	}
	defer logf.Close()
	ns := filepath.Base(dir)
	cmd := exec.Command("dockerd",
		"--config-file", cfgFile,
		"--host", e.Host,
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"--bridge", "none",
		"--iptables=false",
		"--containerd", e.containerd,
		"--containerd-namespace", ns,
		"--containerd-plugins-namespace", ns+"-plugins",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group keeps a terminal's ^C away from it (Close
	// stops it in order); SIGTERM if this process dies first, so it stops
	// its containers instead of leaving them behind. Its own network
	// namespace keeps it away from the host's interfaces: a dockerd with
	// --bridge none deletes the docker0 of the namespace it runs in, which
	// in the host's namespace breaks the system engine's default bridge
	// until that engine restarts. Nothing reaches this engine over the
	// network (its API is a unix socket, its containers use networks it
	// creates in its own namespace), so it needs none of the host's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Cloneflags: syscall.CLONE_NEWNET}
	p, err := proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("engine %s: start dockerd: %w", name, err)
	}
	e.procMu.Lock()
	e.proc = p
	e.procMu.Unlock()
	if e.Client == nil {
		if e.Client, err = client.NewClientWithOpts(client.WithHost(e.Host), client.WithAPIVersionNegotiation()); err != nil {
			return fmt.Errorf("engine %s: %w", name, err)
		}
	}
	if err := e.waitPing(ctx, p); err != nil {
		return fmt.Errorf("engine %s: %w; dockerd log:\n%s", name, err, e.LogTail(20))
	}
	return nil
}

func (e *Engine) process() *proc.Process {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	return e.proc
}

// Kill SIGKILLs a private engine's dockerd and waits until it is gone, as
// a crash would end it: its containers' processes live on in containerd,
// and nothing answers on its socket until Revive.
func (e *Engine) Kill() error {
	p := e.process()
	if e.Shared || p == nil {
		return fmt.Errorf("engine %s: only a private engine can be killed", e.Name)
	}
	p.Kill()
	<-p.Done()
	return nil
}

// Revive starts a killed private engine's dockerd again, on the same data
// root, and waits until it answers. What the engine then says of the
// containers that ran before is Docker's own restore.
func (e *Engine) Revive(ctx context.Context) error {
	p := e.process()
	if e.Shared || p == nil {
		return fmt.Errorf("engine %s: only a private engine can be revived", e.Name)
	}
	if !p.Exited() {
		return fmt.Errorf("engine %s: dockerd still runs", e.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return e.launch(ctx)
}

func (e *Engine) logPath() string { return filepath.Join(e.dir, "dockerd.log") }

// SocketDir is the directory that holds the engine's API socket
// (docker.sock) and nothing else, for a bind mount into a container. For
// the system engine it is empty: its socket's directory holds other
// things, mount Socket itself.
func (e *Engine) SocketDir() string {
	if e.dir == "" {
		return ""
	}
	return filepath.Join(e.dir, "run")
}

// Socket is the path of the engine's API socket on this machine, or ""
// when the system engine is not reached through a unix socket.
func (e *Engine) Socket() string {
	if e.dir != "" {
		return filepath.Join(e.dir, "run", "docker.sock")
	}
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return "/var/run/docker.sock"
	}
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		return p
	}
	return ""
}

// LogTail is the last n lines of a private engine's dockerd log ("" for
// the system engine).
func (e *Engine) LogTail(n int) string {
	if e.dir == "" {
		return ""
	}
	return Tail(e.logPath(), n)
}

func (e *Engine) waitPing(ctx context.Context, p *proc.Process) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := e.Client.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("dockerd exited: %v", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("dockerd did not answer: %v", err)
		case <-tick.C:
		}
	}
}

func loadImages(ctx context.Context, cli *client.Client, tar []byte, images []string) error {
	what := strings.Join(images, ", ")
	resp, err := cli.ImageLoad(ctx, bytes.NewReader(tar), client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("load %s: %w", what, err)
	}
	defer resp.Body.Close()
	if err := StreamError(resp.Body); err != nil {
		return fmt.Errorf("load %s: %w", what, err)
	}
	for _, img := range images {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			return fmt.Errorf("load %s: %w", img, err)
		}
	}
	return nil
}

// StreamError reads a Docker JSON message stream (the answer of an image
// load or build) to its end and returns the first error it carries: a
// failed load or build says so there, not in its HTTP status.
func StreamError(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// RemoveContainers removes the containers on the engine whose labels
// match (all of them when no label is given) and reports what failed.
func (e *Engine) RemoveContainers(ctx context.Context, labels ...string) error {
	args := filters.NewArgs()
	for _, l := range labels {
		args.Add("label", l)
	}
	cs, err := e.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return fmt.Errorf("engine %s: list containers: %w", e.Name, err)
	}
	var errs []error
	for _, c := range cs {
		if c.State == "paused" {
			// On these engines a force-remove of a frozen container waits
			// for a SIGKILL the frozen process never takes (seen in CI:
			// a node's frozen sandboxes held the engine's removal).
			_ = e.Client.ContainerUnpause(ctx, c.ID)
		}
		if err := e.Client.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("engine %s: remove %.12s: %w", e.Name, c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Close removes a private engine: its containers first (so that dockerd
// has none to wait for), its images (through the engine, so that an engine
// keeping its images in containerd leaves nothing in its namespace there),
// then dockerd, then its files. For the system engine it only closes the
// client. It reports what could not be cleaned up; calls after the first
// return the first's result.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		if e.Shared {
			if e.Client != nil {
				e.closeErr = e.Client.Close()
			}
			return
		}
		var errs []error
		if p := e.process(); e.Client != nil && (p == nil || !p.Exited()) {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			errs = append(errs, e.RemoveContainers(ctx))
			for _, img := range e.images {
				if _, err := e.Client.ImageRemove(ctx, img, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("engine %s: remove %s: %w", e.Name, img, err))
				}
			}
			cancel()
		}
		errs = append(errs, e.teardown())
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// teardown stops dockerd and removes the engine's files.
func (e *Engine) teardown() error {
	var errs []error
	if e.Client != nil {
		e.Client.Close()
	}
	if p := e.process(); p != nil && !p.Terminate(30*time.Second) {
		errs = append(errs, fmt.Errorf("engine %s: dockerd did not stop on SIGTERM within 30s; killed it", e.Name))
	}
	errs = append(errs, removeDir(e.dir))
	e.lock.Close()
	return errors.Join(errs...)
}

// Tail returns the last n lines of a file (its read error instead, in
// parentheses): the end of a log for a failure message.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
