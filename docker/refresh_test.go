package docker_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"

	"shoal"
	"shoal/docker"
	"shoal/internal/testenv"
)

// Refresh makes a stopped container again with a new environment and the
// old one's files: its layer (commit), or, past MaxRefreshLayers, its
// whole filesystem in one layer (export and import), and the image's
// volumes mounted again. The same container when nothing changed.
// Remove takes every container, image and volume of the uid.
func TestRefreshKeepsFilesAndVolumes(t *testing.T) {
	dc := testenv.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRuntime(t, nodeID(), "refresh")

	// An image with a VOLUME, as a user's may have.
	base, err := dc.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	volImage := "shoal-test/vol:" + nodeID()
	if _, err := dc.ContainerCommit(ctx, base.ID, container.CommitOptions{Reference: volImage, Changes: []string{"VOLUME /data"}}); err != nil {
		t.Fatal(err)
	}
	_ = dc.ContainerRemove(ctx, base.ID, container.RemoveOptions{Force: true})
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), volImage, image.RemoveOptions{Force: true}) })

	s := spec("rf")
	s.Image, s.Env = volImage, []string{"K=one"}
	id, err := r.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Remove(context.Background(), s.UID) }) // (what a failure left)
	run := func(id, script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := r.Exec(ctx, id, shoalExec(script), &out, &out)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %v %d %q", script, err, res.ExitCode, out.String())
		}
		return out.String()
	}
	run(id, "echo kept > /root/f; echo vol > /data/v")
	if err := r.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if same, err := r.Refresh(ctx, id, s); err != nil || same != id {
		t.Fatalf("refresh with the same environment: %s %v, want the same container %s", same, err, id)
	}

	// refresh gives the stopped container env, starts the new one and
	// checks what it holds; the old one is removed as the agent does.
	refresh := func(old, env string) string {
		t.Helper()
		s.Env = []string{env}
		nid, err := r.Refresh(ctx, old, s)
		if err != nil || nid == old {
			t.Fatalf("refresh to %s: %s %v", env, nid, err)
		}
		if err := r.RemoveContainer(ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx, nid, 0); err != nil {
			t.Fatal(err)
		}
		if got := run(nid, `echo "$K"; cat /root/f /data/v`); got != env[2:]+"\nkept\nvol\n" {
			t.Fatalf("after a refresh to %s: %q", env, got)
		}
		if err := r.Stop(ctx, nid, 0); err != nil {
			t.Fatal(err)
		}
		return nid
	}
	committed := refresh(id, "K=two")
	old := docker.MaxRefreshLayers
	docker.MaxRefreshLayers = 1
	t.Cleanup(func() { docker.MaxRefreshLayers = old })
	flat := refresh(committed, "K=three")
	ins, err := dc.ContainerInspect(ctx, flat)
	if err != nil {
		t.Fatal(err)
	}
	img, err := dc.ImageInspect(ctx, ins.Image)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(img.RootFS.Layers); n != 1 {
		t.Fatalf("a flattened image has %d layers", n)
	}
	var vol string
	for _, m := range ins.Mounts {
		if m.Type == mount.TypeVolume && m.Destination == "/data" {
			vol = m.Name
		}
	}
	if vol == "" {
		t.Fatalf("the refreshed container mounts no volume at /data: %+v", ins.Mounts)
	}

	if err := r.Remove(ctx, s.UID); err != nil {
		t.Fatal(err)
	}
	imgs, err := dc.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelUID+"="+s.UID))})
	if err != nil || len(imgs) != 0 {
		t.Fatalf("images of the uid after Remove: %v %v", imgs, err)
	}
	if _, err := dc.VolumeInspect(ctx, vol); err == nil {
		t.Fatalf("volume %s outlived its sandbox", vol)
	}
}

func shoalExec(script string) shoal.ExecSpec {
	return shoal.ExecSpec{Command: []string{"sh", "-c", script}}
}
