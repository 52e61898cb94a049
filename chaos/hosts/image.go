package hosts

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"shoal/cli"
	"shoal/internal/engine"
)

// nodeDockerfile is the node image: the static shoal-node binary (the
// server, whose tree is shoal's with `node start` in it) and nothing else.
// /tmp is a tmpfs of the container (HostConfig), /data the node's
// bind-mounted data dir.
const nodeDockerfile = `FROM scratch
COPY shoal-node /shoal-node
ENTRYPOINT ["/shoal-node"]
`

// nodeBinary is the shoal-node beside the shoal binary, where make build
// puts it; the node image holds it (shoal would only run it).
func nodeBinary(shoal string) string { return cli.NodeBinaryBeside(shoal) }

// checkStatic fails unless path is a statically linked ELF executable:
// a FROM-scratch image has no dynamic loader or libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hosts: the node binary %s does not exist: the nodes run the shoal-node beside the shoal binary (make build builds both into bin/)", path)
	}
	if err != nil {
		return fmt.Errorf("hosts: binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(p.Open())
			return fmt.Errorf("hosts: binary %s is dynamically linked (interpreter %s) and cannot run in the FROM-scratch node image: build it with CGO_ENABLED=0 (make build does)",
				path, bytes.TrimRight(interp, "\x00"))
		}
	}
	return nil
}

// ensureImage builds tag from binary (shoal-node) unless the image of that tag already
// holds it (its label carries the binary's sha256), and removes the image
// the tag named before, if nothing uses it.
func ensureImage(ctx context.Context, sys *client.Client, tag, binary string, logf func(string, ...any)) error {
	if err := checkStatic(binary); err != nil {
		return err
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("hosts: read the binary: %w", err)
	}
	sum := sha256.Sum256(bin)
	want := hex.EncodeToString(sum[:])
	var old string
	if info, err := sys.ImageInspect(ctx, tag); err == nil {
		if info.Config != nil && info.Config.Labels[LabelBinary] == want {
			return nil
		}
		old = info.ID
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("hosts: inspect image %s: %w", tag, err)
	}
	t0 := time.Now()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(nodeDockerfile)}, {"shoal-node", 0o755, bin}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := sys.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Labels:      map[string]string{LabelBinary: want},
		Remove:      true,
		ForceRemove: true,
	})
	if err != nil {
		return fmt.Errorf("hosts: build the node image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := engine.StreamError(resp.Body); err != nil {
		return fmt.Errorf("hosts: build the node image %s: %w", tag, err)
	}
	info, err := sys.ImageInspect(ctx, tag)
	if err != nil || info.Config == nil || info.Config.Labels[LabelBinary] != want {
		return fmt.Errorf("hosts: the node image %s was not built from %s (%v)", tag, binary, err)
	}
	logf("hosts: built the node image %s from %s in %s", tag, binary, time.Since(t0).Round(time.Millisecond))
	if old != "" && old != info.ID {
		// In use by another run's containers: it stays, untagged.
		sys.ImageRemove(ctx, old, image.RemoveOptions{})
	}
	return nil
}
