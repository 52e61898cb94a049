package testenv

import (
	"bufio"
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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"shoal/docker"
)

// Engine is the Docker engine of one test node. A private engine is an
// extra dockerd started for the test; when that is impossible every node
// shares the system engine and Shared says so.
type Engine struct {
	Name string
	// Host is the engine's address in DOCKER_HOST form; empty means the
	// system engine (DOCKER_HOST or the default socket).
	Host string
	// Shared is true when this is the system engine, which other nodes
	// (and everything else on the machine) also use.
	Shared bool
	// Client talks to this engine; it is closed when the test ends.
	Client *client.Client

	dir  string
	lock *os.File
	proc *process
}

// Environment variables that choose the engines.
const (
	// EnvSharedEngine=1 makes every test node use the system engine.
	EnvSharedEngine = "SHOAL_SHARED_ENGINE"
	// EnvRequireEngines=1 fails a test that would fall back to the shared
	// engine (CI sets it: there every node must have its own).
	EnvRequireEngines = "SHOAL_REQUIRE_ENGINES"
	// EnvContainerd names the containerd socket the extra engines share
	// (default: the first of containerdSockets that answers).
	EnvContainerd = "SHOAL_CONTAINERD"
)

// engineRoot holds every private engine's files. It is short on purpose:
// the engine's API socket lives there and a unix socket path has at most
// 107 bytes.
const (
	engineRoot   = "/tmp"
	enginePrefix = "shoal-eng-"
)

// containerdSockets are where a containerd usually listens: the system
// service, and the one the Docker engine starts for itself.
var containerdSockets = []string{
	"/run/containerd/containerd.sock",
	"/var/run/docker/containerd/containerd.sock",
}

// StartEngine starts a private Docker engine named name for the test and
// loads the sandbox image into it; see StartEngines.
func StartEngine(t testing.TB, name string) *Engine {
	t.Helper()
	return StartEngines(t, name)[0]
}

// StartEngines starts one private Docker engine per name, at once, each an
// extra dockerd beside the system one: its own socket, data root, exec root
// and containerd namespace, sharing the system containerd, with no bridge
// and no iptables rules, and the sandbox image loaded from the system
// engine. When the test ends each engine's containers are removed, its
// dockerd is stopped (SIGTERM, then SIGKILL) and its files are removed.
//
// It needs root, dockerd and a containerd socket. Without them, with
// SHOAL_SHARED_ENGINE=1, or when an engine fails to start and
// SHOAL_REQUIRE_DOCKER is not 1, every name gets the system engine instead
// (Shared is true) and the test log says why; SHOAL_REQUIRE_ENGINES=1 makes
// falling back a failure. It skips (or fails, with SHOAL_REQUIRE_DOCKER=1)
// when there is no system engine at all.
func StartEngines(t testing.TB, names ...string) []*Engine {
	t.Helper()
	return startEngines(t, false, names)
}

func startEngines(t testing.TB, shared bool, names []string) []*Engine {
	t.Helper()
	sys := RequireDocker(t)
	if !shared {
		reason := engineUnsupported()
		if reason == "" {
			sweepOnce.Do(func() { sweepStaleEngines(t.Logf) })
			engines, err := startPrivateEngines(t, sys, names)
			if err == nil {
				return engines
			}
			if os.Getenv("SHOAL_REQUIRE_DOCKER") == "1" {
				t.Fatalf("start the test engines: %v (set %s=1 to share the system engine instead)", err, EnvSharedEngine)
			}
			reason = err.Error()
		}
		if os.Getenv(EnvRequireEngines) == "1" {
			t.Fatalf("%s=1 but no private Docker engine per node can run: %s", EnvRequireEngines, reason)
		}
		t.Logf("testenv: no private Docker engine per node (%s); every node uses the system engine and they are told apart only by their node labels", reason)
	} else {
		t.Logf("testenv: every node uses the system engine, as the test asked")
	}
	engines := make([]*Engine, len(names))
	for i, name := range names {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		engines[i] = &Engine{Name: name, Shared: true, Client: cli}
	}
	return engines
}

// engineUnsupported says why private engines cannot run here, or "".
func engineUnsupported() string {
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

func startPrivateEngines(t testing.TB, sys *client.Client, names []string) ([]*Engine, error) {
	t.Helper()
	tar, err := sandboxImage(sys)
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
		wg.Go(func() { engines[i], errs[i] = startEngine(name, ctrd, tar) })
	}
	wg.Wait()
	for _, e := range engines {
		if e != nil {
			t.Cleanup(func() { e.stop(t) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return engines, nil
}

var (
	imageOnce sync.Once
	imageTar  []byte
	imageErr  error
	sweepOnce sync.Once
)

// sandboxImage is `docker save` of the sandbox image from the system
// engine, read once per test process.
func sandboxImage(sys *client.Client) ([]byte, error) {
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rc, err := sys.ImageSave(ctx, []string{docker.DefaultImage})
		if err != nil {
			imageErr = fmt.Errorf("save %s from the system engine: %w", docker.DefaultImage, err)
			return
		}
		defer rc.Close()
		if imageTar, err = io.ReadAll(rc); err != nil {
			imageErr = fmt.Errorf("save %s from the system engine: %w", docker.DefaultImage, err)
		}
	})
	return imageTar, imageErr
}

// startEngine starts one dockerd and waits until it serves with the image
// loaded. On error, whatever it started is stopped again.
func startEngine(name, containerd string, tar []byte) (e *Engine, err error) {
	dir, err := os.MkdirTemp(engineRoot, enginePrefix)
	if err != nil {
		return nil, err
	}
	// The lock says "in use" to sweepStaleEngines of other test
	// processes; it is released when this process ends, however it ends.
	lock, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("engine %s: lock %s: %w", name, dir, err)
	}
	e = &Engine{Name: name, dir: dir, lock: lock, Host: "unix://" + filepath.Join(dir, "docker.sock")}
	defer func() {
		if err != nil {
			e.teardown(func(string, ...any) {})
			e = nil
		}
	}()
	// An empty config file: the host's /etc/docker/daemon.json (data root,
	// storage driver, log driver) is not this engine's.
	cfgFile := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(cfgFile, []byte("{}\n"), 0o600); err != nil {
		return e, err
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return e, err
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
		"--containerd", containerd,
		"--containerd-namespace", ns,
		"--containerd-plugins-namespace", ns+"-plugins",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group keeps a terminal's ^C away from it (the
	// cleanup stops it in order); SIGTERM if this process dies first, so
	// it stops its containers instead of leaving them behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if e.proc, err = startProcess(cmd); err != nil {
		return e, fmt.Errorf("engine %s: start dockerd: %w", name, err)
	}
	if e.Client, err = client.NewClientWithOpts(client.WithHost(e.Host), client.WithAPIVersionNegotiation()); err != nil {
		return e, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.waitPing(ctx); err != nil {
		return e, fmt.Errorf("engine %s: %w; dockerd log:\n%s", name, err, tail(filepath.Join(dir, "dockerd.log"), 20))
	}
	if err := loadImage(ctx, e.Client, tar); err != nil {
		return e, fmt.Errorf("engine %s: %w", name, err)
	}
	return e, nil
}

func (e *Engine) waitPing(ctx context.Context) error {
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
		case <-e.proc.done:
			return fmt.Errorf("dockerd exited: %v", e.proc.err)
		case <-ctx.Done():
			return fmt.Errorf("dockerd did not answer: %v", err)
		case <-tick.C:
		}
	}
}

func loadImage(ctx context.Context, cli *client.Client, tar []byte) error {
	resp, err := cli.ImageLoad(ctx, bytes.NewReader(tar), client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("load %s: %w", docker.DefaultImage, err)
	}
	defer resp.Body.Close()
	// The body is a stream of JSON messages; a failed load is one with
	// an error, not an HTTP status.
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("load %s: %w", docker.DefaultImage, err)
		}
		if m.Error != "" {
			return fmt.Errorf("load %s: %s", docker.DefaultImage, m.Error)
		}
	}
	if _, err := cli.ImageInspect(ctx, docker.DefaultImage); err != nil {
		return fmt.Errorf("load %s: %w", docker.DefaultImage, err)
	}
	return nil
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
		if err := e.Client.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("engine %s: remove %.12s: %w", e.Name, c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// stop is a private engine's cleanup: containers first (so dockerd has
// none to wait for), then dockerd, then its files.
func (e *Engine) stop(t testing.TB) {
	if t.Failed() {
		t.Logf("engine %s: last lines of the dockerd log:\n%s", e.Name, tail(filepath.Join(e.dir, "dockerd.log"), 30))
	}
	if e.Client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.RemoveContainers(ctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
		// Through the engine, so that an engine keeping its images in
		// containerd leaves nothing in its namespace there.
		if _, err := e.Client.ImageRemove(ctx, docker.DefaultImage, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Logf("cleanup: engine %s: remove %s: %v", e.Name, docker.DefaultImage, err)
		}
		cancel()
	}
	e.teardown(t.Logf)
}

func (e *Engine) teardown(logf func(string, ...any)) {
	if e.Client != nil {
		e.Client.Close()
	}
	if e.proc != nil {
		if !e.proc.terminate(30 * time.Second) {
			logf("engine %s: dockerd did not stop on SIGTERM within 30s; killed it", e.Name)
		}
	}
	removeEngineDir(e.dir, logf)
	e.lock.Close()
}

// removeEngineDir removes what a stopped engine leaves: mounts under its
// directory (there are none after a clean stop), its containerd
// namespaces, and the directory.
func removeEngineDir(dir string, logf func(string, ...any)) {
	unmountUnder(dir, logf)
	ns := filepath.Base(dir)
	if ctr, err := exec.LookPath("ctr"); err == nil {
		if sock, err := containerdSocket(); err == nil {
			for _, n := range []string{ns, ns + "-plugins"} {
				removeNamespace(ctr, sock, n, logf)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		logf("cleanup: remove %s: %v", dir, err)
	}
}

// removeNamespace deletes a containerd namespace and anything a killed
// dockerd left in it. Best effort: a namespace that never existed is fine.
func removeNamespace(ctr, sock, ns string, logf func(string, ...any)) {
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, ctr, append([]string{"--address", sock, "--namespace", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	list, err := run("namespaces", "ls", "-q")
	if err != nil || !containsLine(list, ns) {
		return
	}
	if ids, err := run("containers", "ls", "-q"); err == nil {
		for id := range strings.FieldsSeq(ids) {
			run("tasks", "rm", "-f", id)
			run("containers", "rm", id)
		}
	}
	if out, err := run("namespaces", "rm", ns); err != nil {
		logf("cleanup: containerd namespace %s: %v: %s", ns, err, strings.TrimSpace(out))
	}
}

func containsLine(s, line string) bool {
	for l := range strings.Lines(s) {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string, logf func(string, ...any)) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			logf("cleanup: unmount %s: %v", p, err)
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sweepStaleEngines removes engines that test processes which died
// without their cleanup left behind: a directory nobody holds the lock
// of. Its dockerd, if it still runs, is stopped first.
func sweepStaleEngines(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(engineRoot, enginePrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		// A directory made a moment ago may not be locked yet.
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		lock, err := os.Open(dir)
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue // in use
		}
		logf("testenv: removing the stale test engine %s", dir)
		if pid := staleDockerd(dir); pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
			deadline := time.Now().Add(30 * time.Second)
			for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
				<-time.After(50 * time.Millisecond) // not our child: poll for its exit
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		removeEngineDir(dir, logf)
		lock.Close()
	}
}

// staleDockerd is the pid of the dockerd serving dir, or 0.
func staleDockerd(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "docker.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	// The pid may have been reused: it is ours only if it names dir.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
		return 0
	}
	return pid
}

// process is a child process and the goroutine that reaps it.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has been waited for
	err  error         // Wait's result, set before done closes
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(sig syscall.Signal) {
	if !p.exited() {
		p.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL and waits until the child is reaped.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM (and SIGCONT, in case it is stopped), waits up
// to grace, then kills. It reports whether the child exited on its own.
func (p *process) terminate(grace time.Duration) bool {
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.kill()
		return false
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
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
