package docker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

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
	if !envStale(old.Config.Env, imageEnv, s.Env) {
		return id, nil
	}
	// A refresh cut short earlier may have left a container: only the
	// one recorded (id) is the sandbox's.
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
	commit, err := r.cli.ContainerCommit(ctx, id, container.CommitOptions{
		Comment: fmt.Sprintf("shoal: the files of sandbox %s/%s (uid %s), for a start with a new environment", s.Workspace, s.Name, s.UID),
		Config:  &container.Config{Env: blankedEnv(old.Config.Env, imageEnv)},
	})
	if err != nil {
		return "", r.unreachable(fmt.Errorf("commit container %s: %w", id[:min(12, len(id))], err))
	}
	cfg := *old.Config
	cfg.Image = commit.ID
	cfg.Env = s.Env
	name := ContainerName(s.Workspace, s.Name, s.UID) + "-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	created, err := r.cli.ContainerCreate(ctx, &cfg, old.HostConfig, nil, nil, name)
	if err != nil {
		r.removeImage(ctx, commit.ID)
		return "", r.unreachable(fmt.Errorf("create the refreshed container of %s: %w", id[:min(12, len(id))], err))
	}
	return created.ID, nil
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
