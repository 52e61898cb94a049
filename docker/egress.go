package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"shoal"
)

// Egress sidecars (package egress has the design). A sandbox with egress
// rules has no network of its own (network mode none); beside it runs a
// sidecar, EgressImage's shoal-egress-shim, in the sandbox's network
// namespace (network mode container:SANDBOX), listening on the proxy
// address the sandbox is told (shoal.EgressProxy) and relaying every
// connection to the unix socket the node's proxy serves that sandbox on.
// The socket's directory is bind-mounted into the sidecar, read-only, and
// into nothing else. The sidecar carries no sandbox labels (List, freeze
// and the orphan reaper never see it): its own labels name the sandbox it
// serves.

// DefaultEgressImage is the sidecar image `make image` builds
// (deploy/egress).
const DefaultEgressImage = "shoal/egress:dev"

const (
	// LabelEgressFor is the uid of the sandbox a sidecar serves.
	LabelEgressFor = "shoal.dev/egress-for"
	// LabelEgressSandbox is the sandbox container the sidecar joined, and
	// when that container started (id@RFC3339Nano): a sandbox started
	// again has a new network namespace, and needs a new sidecar.
	LabelEgressSandbox = "shoal.dev/egress-sandbox"
	// egressMount is where the socket's directory is in the sidecar, and
	// egressSocket the socket's name in it.
	egressMount  = "/run/shoal-egress"
	egressSocket = "s"
)

// EgressSocket is the name of the socket file in a sandbox's egress
// directory (EgressSidecar.Dir).
const EgressSocket = egressSocket

// The sidecar's bounds: it relays bytes and holds nothing.
const (
	egressMemory = 32 << 20
	egressPids   = 64
)

// egressName is the sidecar's container name: one per sandbox uid on an
// engine.
func egressName(uid string) string { return "shoal-egress-" + uid }

// withProxyEnv is env with the egress proxy announced (shoal.ProxyEnv);
// the announcement replaces a variable of the same name.
func withProxyEnv(env []string) []string {
	out := make([]string, 0, len(env)+len(shoal.ProxyEnv))
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if !slices.ContainsFunc(shoal.ProxyEnv, func(p string) bool { return strings.HasPrefix(p, name+"=") }) {
			out = append(out, e)
		}
	}
	return append(out, shoal.ProxyEnv...)
}

// networkOf is the network mode of a sandbox's container: none when it
// has egress rules (the proxy is its only way out), else the node's.
func (r *Runtime) networkOf(s shoal.ContainerSpec) string {
	if s.Egress {
		return NetworkNone
	}
	return r.network
}

// env is a sandbox container's environment: the proxy is announced to
// every container with no network of its own, so that rules given later
// (shoal sandbox egress add) work without a restart; where nothing
// listens (no rules) a connection to it is refused, as any connection of
// a network-less container is.
func (r *Runtime) env(s shoal.ContainerSpec) []string {
	if r.networkOf(s) == NetworkNone {
		return withProxyEnv(s.Env)
	}
	return s.Env
}

// EnsureEgress makes sure the sandbox's sidecar runs in the network
// namespace of its container as it runs now: a sidecar of an earlier
// start of the container (or of a container a refresh replaced) is
// removed and made again. The sandbox's container must be running.
func (r *Runtime) EnsureEgress(ctx context.Context, s shoal.EgressSidecar) error {
	sb, err := r.cli.ContainerInspect(ctx, s.Container)
	if err != nil {
		return fmt.Errorf("egress sidecar: inspect sandbox container %s: %w", short(s.Container), err)
	}
	if sb.State == nil || !sb.State.Running {
		return fmt.Errorf("egress sidecar: sandbox container %s is not running", short(s.Container))
	}
	if sb.HostConfig == nil || !sb.HostConfig.NetworkMode.IsNone() {
		// Made with the node's bridge (rules given after it was created
		// on a --sandbox-network bridge node): the proxy would not be its
		// only way out, so it is not called enforced.
		return shoal.FailedPrecondition("sandbox container %s has a network (%s), so a proxy cannot confine it: create the sandbox again with its rules", short(s.Container), sb.HostConfig.NetworkMode)
	}
	// What the sidecar was made for: the container as it runs now, the
	// socket directory, the image and the shim's mode (it passes
	// connections); anything else is made again.
	mark := sb.ID + "@" + sb.State.StartedAt + " " + s.Dir + " " + r.egressImage + " pass"
	name := egressName(s.UID)
	cur, err := r.cli.ContainerInspect(ctx, name)
	switch {
	case err == nil && cur.Config != nil && cur.Config.Labels[LabelEgressSandbox] == mark && cur.State != nil && cur.State.Running:
		return nil
	case err == nil:
		if err := r.RemoveContainer(ctx, cur.ID); err != nil {
			return err
		}
	case !cerrdefs.IsNotFound(err):
		return fmt.Errorf("egress sidecar: inspect %s: %w", name, err)
	}
	pids := int64(egressPids)
	cfg := &container.Config{
		Image: r.egressImage,
		Cmd:   []string{"--listen", strings.TrimPrefix(shoal.EgressProxy, "http://"), "--socket", egressMount + "/" + egressSocket, "--pass"},
		User:  "65534:65534", // nobody
		Labels: map[string]string{
			LabelEgressFor: s.UID, LabelEgressSandbox: mark,
			LabelNode: r.node, LabelCluster: r.cluster,
		},
	}
	host := &container.HostConfig{
		NetworkMode:    container.NetworkMode("container:" + sb.ID),
		Binds:          []string{s.Dir + ":" + egressMount + ":ro"},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Resources:      container.Resources{Memory: egressMemory, MemorySwap: egressMemory, PidsLimit: &pids},
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		// A shim that dies is started again by the engine at once (the
		// agent's next sync would, within its resync period).
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyOnFailure, MaximumRetryCount: 10},
	}
	created, err := r.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		if _, ierr := r.cli.ImageInspect(ctx, r.egressImage); cerrdefs.IsNotFound(ierr) {
			return shoal.FailedPrecondition("egress sidecar image %q is not on node %s's engine: build it with `make image`", r.egressImage, r.node)
		}
		return fmt.Errorf("egress sidecar: create: %w", err)
	}
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		_ = r.RemoveContainer(context.WithoutCancel(ctx), created.ID)
		return fmt.Errorf("egress sidecar: start: %w", err)
	}
	return nil
}

// RemoveEgress removes a sandbox's sidecar; none is success. (It is never
// frozen: no thaw first.)
func (r *Runtime) RemoveEgress(ctx context.Context, uid string) error {
	err := r.cli.ContainerRemove(ctx, egressName(uid), container.RemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is already in progress") {
		return fmt.Errorf("remove the egress sidecar of sandbox %s: %w", uid, err)
	}
	return nil
}

// EgressSidecars lists the uids of the sandboxes this node runs a sidecar
// for (in any state).
func (r *Runtime) EgressSidecars(ctx context.Context) ([]string, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelEgressFor), filters.Arg("label", LabelCluster+"="+r.cluster), filters.Arg("label", LabelNode+"="+r.node))})
	if err != nil {
		return nil, fmt.Errorf("list egress sidecars: %w", err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Labels[LabelEgressFor])
	}
	return out, nil
}

// short is a container id as docker ps shows it.
func short(id string) string { return id[:min(12, len(id))] }
