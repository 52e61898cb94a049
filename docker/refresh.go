package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"

	"shoal"
)

// A container's environment is fixed when it is created: Docker cannot
// change it, and a start runs the process with it again. When a stopped
// sandbox is started after its providers changed (a rotated key, an
// attach, a detach), Refresh gives it a new container with the current
// environment and the old one's files:
//
//  1. docker commit of the stopped container: an image of its writable
//     layer on top of the image it runs. The commit's config names the
//     image's own variables and blanks every other one (NAME=), so that
//     the image's config, what a container made from it starts with, has
//     no credential value: Docker's commit copies each variable of the
//     container it is not told about. (Docker 20.10 also records the
//     committed container's config in the image, ContainerConfig, as it
//     keeps it with the container itself: in the engine's data root,
//     root's only. The image goes with the sandbox.)
//  2. docker create from that image with the same config and host config
//     (command, user, workdir, hostname, limits, tmpfs, labels) and the
//     new environment, under a new name.
//
// The caller records the new id and then removes the old container
// (RemoveContainer); a refresh cut short before that leaves a container
// that the next Refresh or the sandbox's removal takes away (both go by
// the sandbox's uid). The committed images carry the sandbox's labels and
// are removed with it (Remove).
//
// What is kept: every file of the container's own filesystem. What is
// not: the tmpfs mounts (/run/shoal, written again before READY, and /tmp
// of a read-only root) and processes, as with any start. A variable that
// is no longer given (the key of a detached provider) is set empty, not
// unset: Docker keeps every name an image's config has.

// Refresh returns the id of a stopped container with s.Env as its
// environment: id itself when it has that environment already, else a
// new container made from id's files (see above). A running container is
// left as it is (id).
func (r *Runtime) Refresh(ctx context.Context, id string, s shoal.ContainerSpec) (nid string, err error) {
	defer func() { err = scrub(err, s.Secrets) }()
	old, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", shoal.NotFound("container %s was removed outside shoal", id[:min(12, len(id))])
		}
		return "", r.unreachable(fmt.Errorf("inspect container %s: %w", id[:min(12, len(id))], err))
	}
	if old.State == nil || old.State.Running || old.Config == nil || old.HostConfig == nil {
		return id, nil
	}
	img, err := r.cli.ImageInspect(ctx, old.Image)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return "", r.unreachable(fmt.Errorf("inspect image of container %s: %w", id[:min(12, len(id))], err))
	}
	var imageEnv []string
	if img.Config != nil {
		imageEnv = img.Config.Env
	}
	want := s.Env
	if old.HostConfig.NetworkMode.IsNone() {
		want = withProxyEnv(s.Env) // as Run gave it (egress.go)
	}
	if !envStale(old.Config.Env, imageEnv, want) {
		return id, nil
	}
	// A refresh cut short earlier may have left a container, and images
	// no container uses: only the container recorded (id) and its image
	// are the sandbox's.
	others, err := r.byUID(ctx, s.UID)
	if err != nil {
		return "", err
	}
	for _, c := range others {
		if c.ID != id && c.Node == r.node {
			if err := r.RemoveContainer(ctx, c.ID); err != nil {
				return "", err
			}
		}
	}
	if err := r.removeImages(ctx, s.UID); err != nil {
		return "", err
	}
	var imageID string
	if len(img.RootFS.Layers) >= MaxRefreshLayers {
		imageID, err = r.flatten(ctx, id, old.Config.Labels, blankedEnv(old.Config.Env, imageEnv))
	} else {
		var commit container.CommitResponse
		commit, err = r.cli.ContainerCommit(ctx, id, container.CommitOptions{
			Comment: fmt.Sprintf("shoal: the files of sandbox %s/%s (uid %s), for a start with a new environment", s.Workspace, s.Name, s.UID),
			Config:  &container.Config{Env: blankedEnv(old.Config.Env, imageEnv)},
		})
		imageID = commit.ID
	}
	if err != nil {
		return "", r.unreachable(fmt.Errorf("commit container %s: %w", id[:min(12, len(id))], err))
	}
	cfg := *old.Config
	cfg.Image = imageID
	cfg.Env = want
	// The image's volumes (VOLUME) are not in a commit: the new container
	// mounts the old one's, which outlive it (a volume in use is not
	// removed with a container) and go with the sandbox (Remove).
	host := *old.HostConfig
	host.Mounts = slices.Clone(host.Mounts)
	for _, m := range old.Mounts {
		mounted := slices.ContainsFunc(host.Mounts, func(h mount.Mount) bool { return h.Target == m.Destination })
		if m.Type == mount.TypeVolume && m.Name != "" && !mounted { // (an earlier refresh's are in host.Mounts)
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Name, Target: m.Destination})
		}
	}
	name := ContainerName(s.Workspace, s.Name, s.UID) + "-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	created, err := r.cli.ContainerCreate(ctx, &cfg, &host, nil, nil, name)
	if err != nil {
		r.removeImage(ctx, imageID)
		return "", r.unreachable(fmt.Errorf("create the refreshed container of %s: %w", id[:min(12, len(id))], err))
	}
	return created.ID, nil
}

// MaxRefreshLayers: a refresh of a container whose image has this many
// layers flattens its files into an image of one layer (docker export and
// import) instead of adding a layer (docker commit): Docker refuses a
// commit past 125 layers, and every refresh that wrote files adds one.
var MaxRefreshLayers = 100

// flatten makes an image of one layer from a stopped container's whole
// filesystem (docker export, docker import), with its labels and env.
func (r *Runtime) flatten(ctx context.Context, id string, labels map[string]string, env []string) (string, error) {
	rc, err := r.cli.ContainerExport(ctx, id)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		changes = append(changes, fmt.Sprintf("LABEL %s=%s", k, strconv.Quote(labels[k])))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		changes = append(changes, fmt.Sprintf("ENV %s=%s", k, strconv.Quote(v)))
	}
	out, err := r.cli.ImageImport(ctx, image.ImportSource{Source: rc, SourceName: "-"}, "", image.ImportOptions{
		Message: "shoal: the files of a sandbox, flattened", Changes: changes})
	if err != nil {
		return "", err
	}
	defer out.Close()
	// The answer is a stream of JSON messages; the last names the image.
	dec := json.NewDecoder(out)
	var imageID string
	for {
		var m struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("import: %w", err)
		}
		if m.Error != "" {
			return "", fmt.Errorf("import: %s", m.Error)
		}
		if strings.HasPrefix(m.Status, "sha256:") {
			imageID = m.Status
		}
	}
	if imageID == "" {
		return "", errors.New("import: the engine named no image")
	}
	return imageID, nil
}

// envStale reports whether a container's environment (have: what Docker
// reports, the image's variables merged in) differs from want: a wanted
// variable missing or different, or one set (not empty) that is neither
// wanted nor the image's own.
func envStale(have, imageEnv, want []string) bool {
	h, img := envMap(have), envMap(imageEnv)
	w := envMap(want)
	for k, v := range w {
		if hv, ok := h[k]; !ok || hv != v {
			return true
		}
	}
	for k, v := range h {
		if _, ok := w[k]; ok || v == "" {
			continue
		}
		if iv, ok := img[k]; ok && iv == v {
			continue
		}
		return true
	}
	return false
}

// blankedEnv is the environment a commit is told of: the image's own
// variables, and every other name of the container's blanked.
func blankedEnv(have, imageEnv []string) []string {
	out := append([]string(nil), imageEnv...)
	img := envMap(imageEnv)
	for _, kv := range have {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := img[k]; !ok {
			out = append(out, k+"=")
			img[k] = ""
		}
	}
	return out
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// removeImages removes the images committed for a sandbox uid (Refresh).
// Removing the newest also removes the older ones under it (Docker
// prunes untagged parents); one still in use or already gone is left.
func (r *Runtime) removeImages(ctx context.Context, uid string) error {
	imgs, err := r.cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelNode+"="+r.node),
		filters.Arg("label", LabelUID+"="+uid))})
	if err != nil {
		return r.unreachable(fmt.Errorf("list the images of sandbox %s: %w", uid, err))
	}
	for _, im := range imgs {
		if !r.owns(im.Labels, false) {
			continue
		}
		r.removeImage(ctx, im.ID)
	}
	return nil
}

// removeImage removes a committed image and its untagged parents; one in
// use (a container, a child image) or gone is left as it is.
func (r *Runtime) removeImage(ctx context.Context, id string) {
	_, err := r.cli.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		r.log.Debug("remove a committed image", "image", id, "err", err)
	}
}
