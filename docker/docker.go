package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
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
	// LabelCluster is the id of the cluster (store.ClusterID) whose node
	// made the container. Two clusters' nodes may share one engine and
	// even a node id (two dev clusters on one host); the cluster label
	// keeps each from taking the other's containers for orphans.
	LabelCluster = "shoal.dev/cluster"
)

// DefaultImage is the sandbox image built by `make image`.
const DefaultImage = shoal.DefaultImage

// Runtime talks to one Docker engine on behalf of one node of one cluster.
type Runtime struct {
	cli     *client.Client
	node    string
	cluster string
	network string // the sandboxes' network mode
	// egressImage is the egress sidecar's image (egress.go).
	egressImage string
	logs        container.LogConfig
	log         *slog.Logger
	// token marks the execs this Runtime starts (ExecEnv), so that a
	// later Runtime of the same node (the node restarted) can tell them
	// from its own: see ReapExecs.
	token string

	// guard keeps Pause apart from the start of an exec (freezeguard.go).
	guard freezeGuard

	capMu sync.Mutex
	cap   shoal.EngineCapacity
	capAt time.Time
}

// Config of a Runtime.
type Config struct {
	// Host is the engine address (unix:///var/run/docker.sock); empty means
	// DOCKER_HOST or the default socket.
	Host string
	// Node is this node's id, written to every container's labels.
	Node string
	// Cluster is the cluster's id (store.ClusterID), written to every
	// container's labels. The runtime sees and touches only containers
	// that carry it.
	Cluster string
	// Network is what network sandboxes get: NetworkNone (the default: a
	// loopback of their own) or NetworkBridge (the shoal-made bridge
	// network BridgeNetwork, without traffic between containers).
	Network string
	// LogMaxBytes and LogFiles bound what the engine keeps of a sandbox's
	// output: json-file logs rotated at LogMaxBytes, LogFiles of them (0:
	// DefaultLogMaxBytes, DefaultLogFiles). Without a bound a chatty
	// sandbox fills the host's disk.
	LogMaxBytes int64
	LogFiles    int
	// EgressImage is the egress sidecar's image (egress.go); empty is
	// DefaultEgressImage.
	EgressImage string
	Logger      *slog.Logger
}

// The default bound of a sandbox's logs: 3 files of 10 MiB.
const (
	DefaultLogMaxBytes = 10 << 20
	DefaultLogFiles    = 3
)

// The networks a sandbox may get.
const (
	NetworkNone   = "none"
	NetworkBridge = "bridge"
	// BridgeNetwork is the network shoal makes for NetworkBridge.
	BridgeNetwork = "shoal-sandboxes"
)

// Capabilities are the only Linux capabilities a sandbox keeps (all others
// are dropped): what a package manager or a shell's own housekeeping needs
// as root inside the container, and nothing that reaches the host (no
// NET_ADMIN, SYS_ADMIN, MKNOD, NET_RAW, SYS_PTRACE, ...). docs/security.md.
var Capabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"}

// ErrNoEngine means no Docker engine answered.
var ErrNoEngine = errors.New("no Docker engine is reachable")

func dial(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	return cli, nil
}

func ping(ctx context.Context, cli *client.Client) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		return fmt.Errorf("%w at %s: %v", ErrNoEngine, cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersion(pctx)
	return nil
}

// Ping checks that an engine answers at host, before anything that needs
// it starts (a node learns its cluster id, which New needs, only from
// etcd).
func Ping(ctx context.Context, host string) error {
	cli, err := dial(host)
	if err != nil {
		return err
	}
	defer cli.Close()
	return ping(ctx, cli)
}

// New connects to the engine and checks that it answers.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Node == "" || cfg.Cluster == "" {
		return nil, errors.New("docker: node and cluster are required")
	}
	cli, err := dial(cfg.Host)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := ping(ctx, cli); err != nil {
		cli.Close()
		return nil, err
	}
	network := NetworkNone
	switch cfg.Network {
	case "", NetworkNone:
	case NetworkBridge:
		if err := ensureBridge(ctx, cli, BridgeNetwork); err != nil {
			cli.Close()
			return nil, err
		}
		network = BridgeNetwork
	default:
		cli.Close()
		return nil, fmt.Errorf("--sandbox-network: %q is not %s or %s", cfg.Network, NetworkNone, NetworkBridge)
	}
	if cfg.LogMaxBytes < 0 || cfg.LogFiles < 0 {
		cli.Close()
		return nil, fmt.Errorf("--sandbox-log-max-mib, --sandbox-log-files: must not be negative")
	}
	if cfg.LogMaxBytes == 0 {
		cfg.LogMaxBytes = DefaultLogMaxBytes
	}
	if cfg.LogFiles == 0 {
		cfg.LogFiles = DefaultLogFiles
	}
	logs := container.LogConfig{Type: "json-file", Config: map[string]string{
		"max-size": strconv.FormatInt(cfg.LogMaxBytes, 10), "max-file": strconv.Itoa(cfg.LogFiles)}}
	var tok [8]byte
	_, _ = rand.Read(tok[:]) // never fails (crypto/rand)
	if cfg.EgressImage == "" {
		cfg.EgressImage = DefaultEgressImage
	}
	return &Runtime{cli: cli, node: cfg.Node, cluster: cfg.Cluster, network: network, egressImage: cfg.EgressImage, logs: logs, log: cfg.Logger.With("subsystem", "docker"),
		token: hex.EncodeToString(tok[:])}, nil
}

// iccOption is the bridge driver's switch for traffic between the
// containers of one network.
const iccOption = "com.docker.network.bridge.enable_icc"

// ensureBridge makes the sandboxes' bridge network name if the engine
// lacks it: a bridge with inter-container traffic off, so sandboxes reach
// out but not each other. A network of that name that is not such a
// bridge (made by hand, or by someone else) is refused, never used: its
// sandboxes could reach each other.
func ensureBridge(ctx context.Context, cli *client.Client, name string) error {
	for range 2 {
		n, err := cli.NetworkInspect(ctx, name, network.InspectOptions{})
		if err == nil {
			if n.Driver != "bridge" || n.Options[iccOption] != "false" {
				return fmt.Errorf("--sandbox-network bridge: network %s exists but is not a bridge with traffic between containers off (driver %q, %s=%q); remove it (docker network rm %s) and shoal makes it again",
					name, n.Driver, iccOption, n.Options[iccOption], name)
			}
			return nil
		}
		if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("--sandbox-network bridge: inspect network %s: %w", name, err)
		}
		_, err = cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:  "bridge",
			Options: map[string]string{iccOption: "false"},
			Labels:  map[string]string{LabelManaged: "true"},
		})
		if err == nil {
			return nil
		}
		if !cerrdefs.IsConflict(err) {
			return fmt.Errorf("--sandbox-network bridge: make network %s: %w", name, err)
		}
		// Made meanwhile (another node on this engine): inspect it.
	}
	return fmt.Errorf("--sandbox-network bridge: network %s is being made and removed by someone else", name)
}

// Ping asks the engine whether it answers.
func (r *Runtime) Ping(ctx context.Context) error {
	_, err := r.cli.Ping(ctx)
	return err
}

// Host is the engine's address.
func (r *Runtime) Host() string { return r.cli.DaemonHost() }

// Close releases the client.
func (r *Runtime) Close() error { return r.cli.Close() }

// Node is the node id this runtime labels containers with.
func (r *Runtime) Node() string { return r.node }

// Cluster is the cluster id this runtime labels containers with.
func (r *Runtime) Cluster() string { return r.cluster }

// owns reports whether a container's labels make it this cluster's. A
// container from before the cluster label existed carries none; it is
// taken as this cluster's only where its uid is asked for by name (Run,
// Remove: the uid comes from this cluster's own record and uids are
// random), never by the orphan reaper's List, which could not tell two
// clusters' unlabelled containers apart.
func (r *Runtime) owns(labels map[string]string, legacy bool) bool {
	if c, ok := labels[LabelCluster]; ok {
		return c == r.cluster
	}
	return legacy && labels[LabelNode] == r.node
}

// ContainerName is the Docker name of a sandbox's container.
func ContainerName(ws, name, uid string) string {
	return fmt.Sprintf("shoal-%s-%s-%s", ws, name, uid[:min(8, len(uid))])
}

// Run creates and starts a sandbox container and returns its id. A
// container of the same uid that exists already is reused: started if it
// never was, left as it is otherwise (a command that ran and exited is not
// run again behind its user's back), so Run is idempotent.
//
// Errors that retrying cannot fix (the image is missing, Docker refused the
// container's configuration or could not start its process) are
// shoal.FailedPrecondition and carry Docker's own words; the others are
// worth a retry. The id is returned with an error when a container exists.
func (r *Runtime) Run(ctx context.Context, s shoal.ContainerSpec) (id string, err error) {
	defer func() { err = scrub(err, s.Secrets) }()
	existing, err := r.byUID(ctx, s.UID)
	if err != nil {
		return "", err
	}
	for _, c := range existing {
		if c.Node != r.node {
			continue
		}
		if c.State == "created" && !s.Created {
			if err := r.start(ctx, c.ID); err != nil {
				return c.ID, err
			}
			r.settle(ctx, c.ID, s.Settle)
		}
		return c.ID, nil
	}
	cfg := &container.Config{
		Image: s.Image,
		Cmd:   s.Command,
		Env:   r.env(s),
		Labels: map[string]string{
			LabelManaged: "true", LabelUID: s.UID, LabelName: s.Name,
			LabelWorkspace: s.Workspace, LabelNode: r.node, LabelCluster: r.cluster,
		},
		// With no network the engine makes no endpoint for the container
		// (runc still gives it a network namespace of its own with only
		// loopback). Docker 20.10's libnetwork deadlocks when endpoints
		// come and go fast (moby/moby#46661, fixed only after 20.10.24):
		// the chaos suite wedged the engine that way, every container call
		// hanging until dockerd was restarted.
		NetworkDisabled: r.networkOf(s) == NetworkNone,
	}
	var pids *int64
	if s.PidsLimit > 0 {
		pids = &s.PidsLimit
	}
	res := container.Resources{NanoCPUs: s.CPUMillis * 1_000_000, Memory: s.MemoryBytes, PidsLimit: pids}
	if s.MemoryBytes > 0 {
		// Memory plus swap equal to memory: no swap. Docker's default
		// (-1 → twice the memory) lets a sandbox use as much swap again
		// as its limit, slowing the whole host instead of meeting the
		// OOM killer.
		res.MemorySwap = s.MemoryBytes
	}
	host := &container.HostConfig{
		Resources: res,
		// The engine keeps a bounded tail of the sandbox's output
		// (Config.LogMaxBytes, LogFiles): enough for `shoal sandbox logs`,
		// never the host's disk.
		LogConfig: r.logs,
		// The node's network setting (none by default: sandboxes reach
		// only what the operator wires up); never the host's.
		NetworkMode: container.NetworkMode(r.networkOf(s)),
		// No privilege gained through setuid binaries, and only the
		// capabilities listed; no mounts at all (no Docker socket, no
		// host path).
		SecurityOpt:    []string{"no-new-privileges:true"},
		CapDrop:        []string{"ALL"},
		CapAdd:         Capabilities,
		ReadonlyRootfs: s.ReadOnlyRoot,
	}
	// The providers' credentials as files (WriteCredentialFiles): in
	// memory, never on the host's disk.
	// The size is a cap (pages are used as files are written): two full
	// sets of the most credentials the API lets a sandbox have (each
	// file takes at least a page), the old and the new during a swap.
	host.Tmpfs = map[string]string{CredentialMount: "rw,nosuid,nodev,noexec,size=32m,mode=0755"}
	if s.ReadOnlyRoot {
		host.Tmpfs["/tmp"] = "rw,nosuid,nodev,size=64m"
	}
	resp, err := r.cli.ContainerCreate(ctx, cfg, host, nil, nil, ContainerName(s.Workspace, s.Name, s.UID))
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return "", shoal.FailedPrecondition("image %q is not present on this node's Docker engine (nothing can be pulled here); build it with `make image`", s.Image)
		case cerrdefs.IsInvalidArgument(err):
			// Docker checks limits at create ("Range of CPUs is from
			// 0.01 to 2.00"); its words say what to change.
			return "", shoal.FailedPrecondition("Docker refused the container: %s", daemonText(err))
		}
		return "", fmt.Errorf("create container: %w", err)
	}
	if s.Created {
		return resp.ID, nil
	}
	if err := r.start(ctx, resp.ID); err != nil {
		return resp.ID, err
	}
	r.settle(ctx, resp.ID, s.Settle)
	return resp.ID, nil
}

// start starts a created container. A start Docker tried and failed (an
// OCI runtime error: a CPU quota the kernel refuses, a command that does
// not exist) leaves its reason in State.Error and is permanent; an engine
// that did not answer is not.
func (r *Runtime) start(ctx context.Context, id string) error {
	err := r.cli.ContainerStart(ctx, id, container.StartOptions{})
	if err == nil {
		return nil
	}
	if st, ierr := r.Inspect(ctx, id); ierr == nil && st.Error != "" {
		return shoal.FailedPrecondition("Docker could not start the container: %s", st.Error)
	}
	if cerrdefs.IsInvalidArgument(err) {
		return shoal.FailedPrecondition("Docker could not start the container: %s", daemonText(err))
	}
	return fmt.Errorf("start container %s: %w", id[:min(12, len(id))], err)
}

// settle waits up to d for a started container to stop running.
func (r *Runtime) settle(ctx context.Context, id string, d time.Duration) {
	if d <= 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, errs := r.cli.ContainerWait(wctx, id, container.WaitConditionNotRunning)
	// The client's goroutine sends exactly one of the two, then ends.
	select {
	case <-res:
	case <-errs:
	}
}

// unreachable is err as UNAVAILABLE naming the node and its engine when
// the engine could not be reached at all (it is down or restarting), and
// err itself otherwise.
func (r *Runtime) unreachable(err error) error {
	if client.IsErrConnectionFailed(err) {
		return shoal.Unavailable("node %s: its container engine at %s does not answer; try again when it is back (`shoal node list` shows EngineUnavailable once it has been down for --engine-grace)", r.node, r.cli.DaemonHost())
	}
	return err
}

// daemonText is Docker's own message, without the client's prefix.
func daemonText(err error) string {
	return strings.TrimPrefix(err.Error(), "Error response from daemon: ")
}

// Redacted stands in for a secret in an error.
const Redacted = "<redacted>"

// scrub removes every secret from err's text. Docker's errors quote a
// container's environment, which holds credentials: runc refuses a value
// with a NUL byte with `environment variable value can't contain null:
// "KEY=value"`.
func scrub(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	out := redactAll(msg, secrets)
	if out == msg {
		return err
	}
	var e *shoal.Error
	if errors.As(err, &e) {
		return &shoal.Error{Kind: e.Kind, Field: e.Field, Msg: redactAll(e.Msg, secrets)}
	}
	return errors.New(out)
}

// redactAll replaces each secret in s, as it is and in the quoted forms
// Docker's components print it in (Go's %q in runc, JSON in the daemon).
func redactAll(s string, secrets []string) string {
	var forms []string
	for _, v := range secrets {
		if v == "" {
			continue
		}
		forms = append(forms, v)
		q := strconv.Quote(v)
		forms = append(forms, q[1:len(q)-1])
		if j, err := json.Marshal(v); err == nil {
			forms = append(forms, string(j[1:len(j)-1]))
		}
	}
	// Every occurrence of every form is found in the original text first,
	// then the union of those spans is replaced: replacing one form at a
	// time would break an overlapping occurrence of another apart and
	// leave most of it in the clear.
	hide := make([]bool, len(s))
	for _, f := range forms {
		for i := 0; ; {
			j := strings.Index(s[i:], f)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(f); k++ {
				hide[k] = true
			}
			i += j + 1
		}
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if !hide[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		for i < len(s) && hide[i] {
			i++
		}
		b.WriteString(Redacted)
	}
	return b.String()
}

// envSecrets is what must not appear of a container's environment in its
// error text when the caller cannot say which variables are credentials
// (Inspect): every entry whole, and every value long enough not to be a
// common word. Plain spec.env values are hidden too; that errs on the
// safe side.
func envSecrets(env []string) []string {
	out := make([]string, 0, 2*len(env))
	for _, e := range env {
		out = append(out, e)
		if _, v, ok := strings.Cut(e, "="); ok && len(v) >= minSecretLen {
			out = append(out, v)
		}
	}
	return out
}

// minSecretLen: shorter values are redacted only with their key.
const minSecretLen = 6

// Remove force-removes every container of a sandbox uid that this node
// made in this cluster (only the owner touches its containers), then the
// images committed for it (refresh.go). Removing what is already gone is
// success.
func (r *Runtime) Remove(ctx context.Context, uid string) error {
	// Its egress sidecar first: it lives in the sandbox's network
	// namespace, and would outlive the sandbox's container.
	if err := r.RemoveEgress(ctx, uid); err != nil {
		return err
	}
	cs, err := r.byUID(ctx, uid)
	if err != nil {
		return err
	}
	var volumes []string
	for _, c := range cs {
		// The image's volumes: a container made by a refresh mounts
		// them by name, and Docker removes only anonymous ones with it.
		if ins, err := r.cli.ContainerInspect(ctx, c.ID); err == nil {
			for _, m := range ins.Mounts {
				if m.Type == mount.TypeVolume && m.Name != "" {
					volumes = append(volumes, m.Name)
				}
			}
		}
		if err := r.RemoveContainer(ctx, c.ID); err != nil {
			return err
		}
	}
	for _, v := range volumes {
		if err := r.cli.VolumeRemove(ctx, v, false); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			r.log.Warn("remove a sandbox's volume", "volume", v, "uid", uid, "err", err)
		}
	}
	return r.removeImages(ctx, uid)
}

// RemoveContainer force-removes one container; gone is success. A frozen
// (paused) container is thawed first: on an engine that shares a
// containerd under a namespace of its own (the cluster tests' and the
// chaos hosts' engines), Docker 20.10's force-remove of a frozen container
// waits for a SIGKILL the frozen process never takes, and held a node's
// whole rejoin past its deadline (CI's cluster chaos, owner-kill: the
// node's other containers stayed frozen). The thaw lasts until the kill.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	r.thaw(ctx, id)
	err := r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is already in progress") {
		return fmt.Errorf("remove container %s: %w", id[:min(12, len(id))], err)
	}
	return nil
}

// thaw unpauses a frozen container before a removal or a stop kills it
// (RemoveContainer says why); failures are the kill's to report.
func (r *Runtime) thaw(ctx context.Context, id string) {
	if ci, err := r.cli.ContainerInspect(ctx, id); err == nil && ci.State != nil && ci.State.Paused {
		if err := r.cli.ContainerUnpause(ctx, id); err != nil && !cerrdefs.IsNotFound(err) {
			r.log.Warn("thaw a frozen container before killing it", "container", short(id), "err", err)
		}
	}
}

// List returns this node's shoal containers of this cluster (all states).
func (r *Runtime) List(ctx context.Context) ([]shoal.Container, error) {
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelCluster+"="+r.cluster), filters.Arg("label", LabelNode+"="+r.node))
	return r.list(ctx, f, false)
}

// byUID lists this node's containers of a sandbox uid in this cluster.
func (r *Runtime) byUID(ctx context.Context, uid string) ([]shoal.Container, error) {
	return r.list(ctx, filters.NewArgs(filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelNode+"="+r.node), filters.Arg("label", LabelUID+"="+uid)), true)
}

// Pause freezes a container's processes (docker pause); one already paused
// or not running is left as it is. It waits for the execs that are
// starting in the container to have started (freezeGuard says why).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	release, err := r.guard.freezing(ctx, id)
	if err != nil {
		return fmt.Errorf("pause container %s: waiting for the execs starting in it: %w", id[:min(12, len(id))], err)
	}
	defer release()
	err = r.cli.ContainerPause(ctx, id)
	// "cannot pause a paused container" is containerd's answer when the
	// engine's own state lags a pause it made (it reads containerd's
	// events afterwards).
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "is already paused") &&
		!strings.Contains(err.Error(), "pause a paused container") &&
		!strings.Contains(err.Error(), "is not running") {
		return fmt.Errorf("pause container %s: %w", id[:min(12, len(id))], err)
	}
	return nil
}

// Unpause thaws a container paused by Pause; one that is not paused is
// left as it is.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	err := r.cli.ContainerUnpause(ctx, id)
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "is not paused") {
		return fmt.Errorf("unpause container %s: %w", id[:min(12, len(id))], err)
	}
	return nil
}

// Stop stops a container as docker stop does: its stop signal (SIGTERM
// unless the image names another), then SIGKILL after grace (rounded up
// to whole seconds, the engine's unit). The container and its files stay.
// One that is not running is left as it is; a missing one is NotFound.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	r.thaw(ctx, id) // as RemoveContainer: a frozen process takes no signal
	secs := int((grace + time.Second - 1) / time.Second)
	err := r.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs})
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return shoal.NotFound("container %s was removed outside shoal", id[:min(12, len(id))])
	}
	return r.unreachable(fmt.Errorf("stop container %s: %w", id[:min(12, len(id))], err))
}

// Start starts a stopped container again (docker start): the same
// container, its files and the environment it was created with. Like Run
// it then waits up to settle for a command that ends at once. One that
// runs already is left as it is; a missing one is NotFound.
func (r *Runtime) Start(ctx context.Context, id string, settle time.Duration) error {
	if err := r.start(ctx, id); err != nil {
		if st, ierr := r.Inspect(ctx, id); ierr == nil && !st.Exists {
			return shoal.NotFound("container %s was removed outside shoal", id[:min(12, len(id))])
		}
		return r.unreachable(err)
	}
	r.settle(ctx, id, settle)
	return nil
}

// list returns the containers that match f and that this cluster owns
// (legacy: see owns).
func (r *Runtime) list(ctx context.Context, f filters.Args, legacy bool) ([]shoal.Container, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]shoal.Container, 0, len(cs))
	for _, c := range cs {
		if !r.owns(c.Labels, legacy) {
			continue
		}
		out = append(out, shoal.Container{
			ID: c.ID, UID: c.Labels[LabelUID], Name: c.Labels[LabelName],
			Workspace: c.Labels[LabelWorkspace], Node: c.Labels[LabelNode],
			State: string(c.State), Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

// Inspect reports a container's state; a missing container is
// ContainerState{Exists: false} and no error.
func (r *Runtime) Inspect(ctx context.Context, id string) (shoal.ContainerState, error) {
	ci, err := r.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return shoal.ContainerState{}, nil
	}
	if err != nil {
		return shoal.ContainerState{}, fmt.Errorf("inspect container: %w", err)
	}
	if ci.ContainerJSONBase == nil || ci.State == nil {
		return shoal.ContainerState{}, fmt.Errorf("inspect container %s: the engine's answer has no state", id[:min(12, len(id))])
	}
	st := ci.State
	errText := st.Error
	if errText != "" && ci.Config != nil {
		errText = redactAll(errText, envSecrets(ci.Config.Env))
	}
	finished, _ := time.Parse(time.RFC3339Nano, st.FinishedAt) // "0001-01-01T00:00:00Z" when it never exited
	started, _ := time.Parse(time.RFC3339Nano, st.StartedAt)
	return shoal.ContainerState{Exists: true, Running: st.Running, Paused: st.Paused, Status: string(st.Status), ExitCode: st.ExitCode, OOM: st.OOMKilled, Error: errText,
		FinishedAt: finished, StartedAt: started}, nil
}

// execWrapper runs an exec'd command under /bin/sh, which first writes
// its own pid (in the container's pid namespace) as a line on stdout and
// then execs the command in place, so the pid is the command's. Docker has
// no API to kill an exec'd process, and ContainerExecInspect's Pid is a host
// pid, useless to a node that does not share the engine's host. With the
// in-container pid a second exec can kill it: runc starts every exec'd
// process as a session and process-group leader, so `kill -9 -PID` takes
// its children too. The sandbox image (busybox) has sh and kill.
const execWrapper = `echo "$$"; exec -- "$@"`

// ExecEnv is set in the environment of every exec to the token of the
// Runtime that started it (a random value made once per Runtime, so once
// per run of a node). The command and whatever it starts inherit it.
// ReapExecs reads it to find the execs an earlier run left behind.
const ExecEnv = shoal.ExecEnv

// KillTimeout bounds the kill of an exec whose caller went away.
const KillTimeout = 10 * time.Second

// Exec runs the spec's command in the container, copying its output to
// stdout and stderr as it is produced (all to stdout with a TTY), and
// returns its exit code. When ctx ends before the command does, or its
// output can no longer be delivered, the command and its process group are
// killed before Exec returns; at the spec's Timeout they are killed too,
// and the result is ExitTimedOut.
func (r *Runtime) Exec(ctx context.Context, id string, spec shoal.ExecSpec, stdout, stderr io.Writer) (shoal.ExecResult, error) {
	closeStdin := sync.OnceFunc(func() {
		if spec.Stdin != nil {
			spec.Stdin.Close()
		}
	})
	defer closeStdin()
	opts := container.ExecOptions{
		Cmd:          append([]string{"/bin/sh", "-c", execWrapper, "shoal-exec"}, spec.Command...),
		Env:          append(slices.Clone(spec.Env), ExecEnv+"="+r.token),
		User:         spec.User,
		WorkingDir:   spec.WorkDir,
		Tty:          spec.TTY,
		AttachStdout: true, AttachStderr: true, AttachStdin: spec.Stdin != nil,
	}
	if spec.TTY && spec.Size.Rows > 0 && spec.Size.Cols > 0 {
		opts.ConsoleSize = &[2]uint{spec.Size.Rows, spec.Size.Cols}
	}
	// Until its process has started (the wrapper's pid line: pw below)
	// the container is not frozen under the exec (freezeGuard).
	started, err := r.guard.starting(ctx, id)
	if err != nil {
		return shoal.ExecResult{}, err
	}
	defer started()
	ex, err := r.cli.ContainerExecCreate(ctx, id, opts)
	if err != nil {
		if u := r.unreachable(err); u != err {
			return shoal.ExecResult{}, u
		}
		return shoal.ExecResult{}, execCreateError(id, err)
	}
	// Attaching starts the process. It must not be cut short by ctx: a
	// process started by an attach whose answer never arrived could not
	// be killed. A cancelled ctx is handled right after.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillTimeout)
	att, err := r.cli.ContainerExecAttach(actx, ex.ID, container.ExecAttachOptions{Tty: spec.TTY, ConsoleSize: opts.ConsoleSize})
	cancel()
	if err != nil {
		r.settleStart(ctx, ex.ID, err)
		return shoal.ExecResult{}, r.execStartError(ctx, id, err)
	}
	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after att.Close below: closing the connection ends every copy
	defer att.Close()
	// Before the wait too: the copy of stdin may be blocked reading it.
	defer closeStdin()
	pw := &pidWriter{w: stdout, known: make(chan struct{}), started: started}
	var copyErr error
	ended := make(chan struct{}) // closed when the output copy has returned
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ended)
		if spec.TTY {
			_, copyErr = io.Copy(pw, att.Reader)
			return
		}
		_, copyErr = stdcopy.StdCopy(pw, stderr, att.Reader)
	}()
	if spec.Stdin != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Input waits for the wrapper's pid line: a terminal echoes
			// what it reads, and the echo must not come before the pid.
			select {
			case <-pw.known:
			case <-ended:
				return
			}
			// Only a clean end of stdin reaches the command as EOF: a
			// broken input stream must not look like finished input (the
			// caller ends ctx then, and the command is killed).
			if _, err := io.Copy(att.Conn, spec.Stdin); err == nil {
				_ = att.CloseWrite()
			}
		}()
	}
	if spec.TTY && spec.Resize != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ended:
					return
				case sz := <-spec.Resize:
					err := r.cli.ContainerExecResize(ctx, ex.ID, container.ResizeOptions{Height: sz.Rows, Width: sz.Cols})
					if err != nil && ctx.Err() == nil {
						r.log.Debug("exec resize", "container", id[:min(12, len(id))], "err", err)
					}
				}
			}
		}()
	}

	select {
	case <-ended:
		if copyErr != nil {
			// The output cannot be delivered (the caller is gone) or the
			// engine's stream broke: either way nobody will see this
			// command's result, so it must not run on.
			r.killExec(ctx, id, spec.User, ex.ID, pw, ended)
			switch {
			case ctx.Err() != nil:
				return shoal.ExecResult{}, ctx.Err()
			case pw.err != nil:
				return shoal.ExecResult{}, pw.err
			}
			return shoal.ExecResult{}, fmt.Errorf("exec output: %w", copyErr)
		}
	case <-ctx.Done():
		r.killExec(ctx, id, spec.User, ex.ID, pw, ended)
		return shoal.ExecResult{}, ctx.Err()
	case <-timeout:
		r.killExec(ctx, id, spec.User, ex.ID, pw, ended)
		return shoal.ExecResult{ExitCode: shoal.ExitTimedOut, TimedOut: true}, nil
	}
	if pw.err != nil {
		return shoal.ExecResult{}, pw.err
	}
	// The output ends when the process has exited; the exit code may be
	// recorded a moment later.
	for {
		ins, err := r.cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return shoal.ExecResult{}, fmt.Errorf("exec inspect: %w", err)
		}
		if !ins.Running {
			return shoal.ExecResult{ExitCode: ins.ExitCode}, nil
		}
		select {
		case <-ctx.Done():
			r.killExec(ctx, id, spec.User, ex.ID, pw, ended)
			return shoal.ExecResult{}, ctx.Err()
		case <-timeout:
			// The output ended (say, the command closed it) but the
			// command runs on: the deadline still holds.
			r.killExec(ctx, id, spec.User, ex.ID, pw, ended)
			return shoal.ExecResult{ExitCode: shoal.ExitTimedOut, TimedOut: true}, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killScript kills an exec'd process ($1), its process group, and every
// process of its session: runc makes each exec a session leader, and a
// shell with job control (an interactive one) puts each job in a process
// group of its own, in that session. NSsid is the session id in the
// container's pid namespace.
const killScript = `kill -9 -"$1" "$1" 2>/dev/null
for f in /proc/[0-9]*/status; do
	if grep -q "^NSsid:[[:space:]]*$1\$" "$f" 2>/dev/null; then p=${f#/proc/}; kill -9 "${p%/status}" 2>/dev/null; fi
done
true`

// killExec kills an exec'd process, its process group and its session, as
// user (the exec's own: a command of another uid could refuse the signal).
// The pid may not have arrived yet when the caller left at once; it is
// waited for while the output stream lives (ended is closed when it has
// ended).
func (r *Runtime) killExec(ctx context.Context, id, user, execID string, pw *pidWriter, ended <-chan struct{}) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillTimeout)
	defer cancel()
	select {
	case <-pw.known:
	case <-ended: // a pid line, if there was one, has been read
	case <-kctx.Done():
	}
	select {
	case <-pw.known:
	default:
		r.log.Warn("exec ended early before its pid was known; it cannot be killed", "container", id[:min(12, len(id))])
		return
	}
	// A process that has exited by itself is left alone: its pid may be
	// reused already.
	if ins, err := r.cli.ContainerExecInspect(kctx, execID); err == nil && !ins.Running {
		return
	}
	pid := strconv.Itoa(pw.pid)
	if _, err := r.runAs(kctx, id, user, []string{"/bin/sh", "-c", killScript, "shoal-kill", pid}, nil); err != nil {
		r.log.Warn("kill exec", "container", id[:min(12, len(id))], "pid", pid, "err", err)
	}
}

// maxRunOutput bounds what run keeps of a command's output.
const maxRunOutput = 64 << 10

// ranCommand is the outcome of run.
type ranCommand struct {
	stdout, stderr string
	exitCode       int
}

// run runs a short command of shoal's own in a container, waits for it to
// end (its output read to the end) and returns its output and exit code.
func (r *Runtime) run(ctx context.Context, id string, cmd, env []string) (ranCommand, error) {
	return r.runAs(ctx, id, "", cmd, env)
}

// runAs is run as user (UID[:GID]; "" is the image's user). The command
// runs under execWrapper, as Exec's do, so that the freeze guard knows
// when it has started; its pid line is not part of the output.
func (r *Runtime) runAs(ctx context.Context, id, user string, cmd, env []string) (ranCommand, error) {
	started, err := r.guard.starting(ctx, id)
	if err != nil {
		return ranCommand{}, err
	}
	defer started()
	ex, err := r.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: append([]string{"/bin/sh", "-c", execWrapper, "shoal-run"}, cmd...),
		Env: env, User: user, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return ranCommand{}, execCreateError(id, err)
	}
	// As Exec's: an attach cut short by ctx could leave a process
	// starting that nobody waits for.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillTimeout)
	att, err := r.cli.ContainerExecAttach(actx, ex.ID, container.ExecAttachOptions{})
	cancel()
	if err != nil {
		r.settleStart(ctx, ex.ID, err)
		return ranCommand{}, r.execStartError(ctx, id, err)
	}
	var out, errb bytes.Buffer
	pw := &pidWriter{w: &limitWriter{w: &out, n: maxRunOutput}, known: make(chan struct{}), started: started}
	_, err = stdcopy.StdCopy(pw, &limitWriter{w: &errb, n: maxRunOutput}, att.Reader)
	att.Close()
	if err != nil {
		r.settleStart(ctx, ex.ID, err)
	}
	started()
	if pw.err != nil {
		return ranCommand{}, pw.err
	}
	if err != nil {
		return ranCommand{}, fmt.Errorf("exec output: %w", err)
	}
	// The output has ended with the process; the exit code may be
	// recorded a moment later.
	for {
		ins, err := r.cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return ranCommand{}, fmt.Errorf("exec inspect: %w", err)
		}
		if !ins.Running {
			return ranCommand{stdout: out.String(), stderr: errb.String(), exitCode: ins.ExitCode}, nil
		}
		select {
		case <-ctx.Done():
			return ranCommand{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// execCreateError is the error of an exec the engine would not create: a
// container that is gone or not running is FailedPrecondition, a frozen
// (paused) one Unavailable, since it takes execs again once its node holds
// its lease and thaws it.
func execCreateError(id string, err error) error {
	text := daemonText(err)
	switch {
	case cerrdefs.IsConflict(err) && strings.Contains(text, "is paused"):
		return shoal.Unavailable("container %s "+frozenText, short(id))
	case cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err):
		return shoal.FailedPrecondition("container is not running: %s", text)
	}
	return fmt.Errorf("exec create: %w", err)
}

// execStartError is the error of an exec the engine created but would
// not start. It answers 409 when the container is no longer running or,
// its state lagging containerd's events after a freeze and a thaw, takes
// it for paused.
func (r *Runtime) execStartError(ctx context.Context, id string, err error) error {
	if !refusedStart(err) {
		return fmt.Errorf("exec attach: %w", err)
	}
	if st, ierr := r.Inspect(ctx, id); ierr == nil && !st.Running {
		return shoal.FailedPrecondition("container is not running (%s)", st.Status)
	}
	return shoal.Unavailable("container %s "+frozenText, short(id))
}

// refusedStart: the engine refused to start an exec (409 to the attach's
// upgrade), so none began.
func refusedStart(err error) bool { return strings.Contains(err.Error(), "received 409") }

// settleStart returns once an exec whose attach or output failed (err)
// cannot still be starting: the engine goes on starting an exec after its
// caller's connection failed, and the freeze guard must not let a pause
// in before runc has done (freezeGuard). A start the engine refused (409)
// never began; otherwise it waits, at most KillTimeout, until the engine
// reports the exec's process (a pid) or that it ended, or has not begun
// starting it for a moment (the request never reached it).
func (r *Runtime) settleStart(ctx context.Context, execID string, err error) {
	if refusedStart(err) {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillTimeout)
	defer cancel()
	idleSince := time.Now()
	for {
		ins, ierr := r.cli.ContainerExecInspect(sctx, execID)
		if ierr != nil || ins.Pid != 0 || ins.ExitCode != 0 {
			return
		}
		if ins.Running {
			idleSince = time.Now() // starting: wait for its pid
		} else if time.Since(idleSince) > 250*time.Millisecond {
			return
		}
		select {
		case <-sctx.Done():
			r.log.Warn("an exec whose attach failed did not report its process in time; freezes of its container wait no longer", "exec", short(execID))
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// frozenText says why an exec did not start in a frozen container.
const frozenText = "is frozen (its node is fenced until it holds its lease again): execs start once it is thawed"

// limitWriter keeps the first n bytes written to it and drops the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if keep := min(len(p), l.n); keep > 0 {
		if _, err := l.w.Write(p[:keep]); err != nil {
			return 0, err
		}
		l.n -= keep
	}
	return len(p), nil
}

// reapScript kills, inside a container, the execs whose ExecEnv is set
// and is not $1 (the token of the Runtime that runs it), and prints
// "PID NAME" for each. An exec's own process is the only kind whose
// parent is outside the container's pid namespace (ppid 0) besides the
// container's init (pid 1), which is never touched: so the sandbox's own
// command and everything it starts, and what an exec started and left
// running when it ended on its own (re-parented inside the container),
// are never taken for an exec. runc starts an exec's process as the
// leader of a session of its own; its process group goes at once, then
// whatever else is in its session (the jobs of an interactive shell).
// It needs sh, tr and kill (busybox has them).
const reapScript = `cur=$1 stale=
command -v tr >/dev/null 2>&1 || { echo "tr: not found" >&2; exit 127; }
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	if [ "$p" = 1 ] || [ "$p" = "$$" ]; then continue; fi
	read -r st 2>/dev/null <"$d/stat" || continue
	set -- ${st##*") "}
	[ "$2" = 0 ] || continue
	env=$(tr '\0' '\n' 2>/dev/null <"$d/environ") || continue
	case "
$env
" in
	*"
` + ExecEnv + `=$cur
"*) ;;
	*"
` + ExecEnv + `="*)
		kill -9 -"$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || continue
		comm=${st#*"("}
		echo "$p ${comm%")"*}"
		stale="$stale $p " ;;
	esac
done
[ -n "$stale" ] || exit 0
for d in /proc/[0-9]*; do
	read -r st 2>/dev/null <"$d/stat" || continue
	set -- ${st##*") "}
	case "$stale" in *" $4 "*) kill -9 "${d#/proc/}" 2>/dev/null ;; esac
done
exit 0`

// ReapExecs kills the execs in a container that an earlier Runtime (an
// earlier run of this node: one that died without ending its execs)
// started and that still run, with their process groups and sessions, and
// reports them. The execs of this Runtime, execs started by hand (docker
// exec) and the sandbox's own processes are left alone (reapScript says
// how they are told apart). Docker runs an exec on when the caller that
// attached to it goes away, and has no call that ends one.
//
// A container that is gone or not running has nothing to reap; one that
// is paused cannot be looked into (shoal.Unavailable: try again once it
// runs); an image without sh or tr cannot be (shoal.FailedPrecondition).
func (r *Runtime) ReapExecs(ctx context.Context, id string) ([]shoal.ReapedExec, error) {
	short := id[:min(12, len(id))]
	ci, err := r.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect container: %w", err)
	}
	if ci.ContainerJSONBase == nil || ci.State == nil || !ci.State.Running {
		return nil, nil
	}
	if ci.State.Paused {
		return nil, shoal.Unavailable("container %s is paused: its execs can be looked at once it runs", short)
	}
	// Docker lists an exec here from its creation until its process
	// exits (20.10 drops it at the exit): none means none runs.
	if len(ci.ExecIDs) == 0 {
		return nil, nil
	}
	res, err := r.run(ctx, id, []string{"/bin/sh", "-c", reapScript, "shoal-reap", r.token}, []string{ExecEnv + "=" + r.token})
	if err != nil {
		return nil, err
	}
	var reaped []shoal.ReapedExec
	sc := bufio.NewScanner(strings.NewReader(res.stdout))
	for sc.Scan() {
		pid, name, _ := strings.Cut(sc.Text(), " ")
		if n, err := strconv.Atoi(pid); err == nil {
			reaped = append(reaped, shoal.ReapedExec{PID: n, Command: name})
		}
	}
	if res.exitCode != 0 {
		text := strings.TrimSpace(res.stderr)
		if res.exitCode == 126 || res.exitCode == 127 {
			return reaped, shoal.FailedPrecondition("container %s: looking for execs left by an earlier run needs sh and tr in the sandbox's image: %s", short, text)
		}
		return reaped, fmt.Errorf("container %s: the exec reaper exited with %d: %s", short, res.exitCode, text)
	}
	return reaped, nil
}

// pidWriter takes the wrapper's pid line off the front of stdout and
// passes the rest on.
type pidWriter struct {
	w     io.Writer
	line  []byte
	pid   int
	err   error         // set when the first line is not a pid
	known chan struct{} // closed once pid is set
	// started, if set, is called once pid is set: the process has started
	// (it releases the exec's freeze guard).
	started func()
}

func (p *pidWriter) Write(b []byte) (int, error) {
	select {
	case <-p.known:
		return p.w.Write(b)
	default:
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		p.line = append(p.line, b...)
		if len(p.line) > 20 {
			return 0, p.fail()
		}
		return len(b), nil
	}
	p.line = append(p.line, b[:i]...)
	// A terminal ends the line with \r\n.
	pid, err := strconv.Atoi(string(bytes.TrimSuffix(p.line, []byte("\r"))))
	if err != nil || pid <= 0 {
		return 0, p.fail()
	}
	p.pid = pid
	if p.started != nil {
		p.started() // before known: a kill that follows must not queue behind a freeze this exec holds off
	}
	close(p.known)
	if rest := b[i+1:]; len(rest) > 0 {
		if n, err := p.w.Write(rest); err != nil {
			return i + 1 + n, err
		}
	}
	return len(b), nil
}

func (p *pidWriter) fail() error {
	answer := string(p.line[:min(len(p.line), 200)])
	if strings.Contains(answer, "in a paused") {
		// "cannot exec in a paused state" (containerd), "... in a paused
		// container" (runc): the engine's own state lagged a freeze.
		p.err = shoal.Unavailable("the container " + frozenText)
		return p.err
	}
	if strings.Contains(answer, "chdir to cwd") {
		// The engine could not enter --workdir: say that, not that the
		// image lacks a shell.
		p.err = shoal.FailedPrecondition("workdir: no such directory in the sandbox (the engine answered %q)", strings.TrimSpace(answer))
		return p.err
	}
	p.err = shoal.FailedPrecondition("exec needs /bin/sh in the sandbox image; it answered %q", answer)
	return p.err
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
		if u := r.unreachable(err); u != err {
			return u
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

// Events streams container events of this node's shoal containers (of this
// cluster) until ctx
// ends or the stream breaks (the error is sent, then both channels close).
func (r *Runtime) Events(ctx context.Context) (<-chan shoal.ContainerEvent, <-chan error) {
	f := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelCluster+"="+r.cluster),
		filters.Arg("label", LabelNode+"="+r.node),
	)
	msgs, errs := r.cli.Events(ctx, events.ListOptions{Filters: f})
	out := make(chan shoal.ContainerEvent, 64)
	outErr := make(chan error, 1)
	go func() {
		defer close(out)
		defer close(outErr)
		for {
			select {
			case m := <-msgs:
				e := shoal.ContainerEvent{Action: string(m.Action), ID: m.Actor.ID, UID: m.Actor.Attributes[LabelUID], ExitCode: m.Actor.Attributes["exitCode"]}
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

// capacityTTL: the engine's CPUs and memory change only with its machine,
// and docker info is slow on some engines, so it is asked once a minute.
const capacityTTL = time.Minute

// Capacity reports the engine's CPU count and memory (docker info).
func (r *Runtime) Capacity(ctx context.Context) (shoal.EngineCapacity, error) {
	r.capMu.Lock()
	defer r.capMu.Unlock()
	if !r.capAt.IsZero() && time.Since(r.capAt) < capacityTTL {
		return r.cap, nil
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return shoal.EngineCapacity{}, fmt.Errorf("docker info: %w", err)
	}
	r.cap, r.capAt = shoal.EngineCapacity{NCPU: info.NCPU, MemTotal: info.MemTotal}, time.Now()
	return r.cap, nil
}

// HasImage reports whether the engine has an image.
func (r *Runtime) HasImage(ctx context.Context, ref string) (bool, error) {
	_, err := r.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
