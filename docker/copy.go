package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"shoal"
)

// Copies in and out of a container's filesystem go through the engine's
// archive API, which works on a stopped container as on a running one,
// except on a tmpfs mount (a read-only sandbox's /tmp): the engine reads
// and writes the container's layer beneath it, where nothing in the
// container sees what it writes, and refuses outright on a read-only root
// (moby/moby#22020). There tar and sh in the container do the copy, as
// kubectl cp does, while it runs: a tmpfs exists only then.

// StatPath reports what is at p in the container (its last element not
// followed); nothing there is shoal.NotFound.
func (r *Runtime) StatPath(ctx context.Context, id, p string) (shoal.PathStat, error) {
	c, err := r.copyTarget(ctx, id, p)
	if err != nil {
		return shoal.PathStat{}, err
	}
	if c.tmpfs != "" {
		return r.statExec(ctx, id, p)
	}
	st, err := r.cli.ContainerStatPath(ctx, id, enginePath(p))
	if err != nil {
		return shoal.PathStat{}, r.copyErr(err, p, c)
	}
	return shoal.PathStat{Name: st.Name, Size: st.Size, Mode: st.Mode, ModTime: st.Mtime, LinkTarget: st.LinkTarget}, nil
}

// CopyTo extracts a tar stream into dir, an existing directory of the
// container. Entries keep the owners their headers name.
func (r *Runtime) CopyTo(ctx context.Context, id, dir string, tar io.Reader) error {
	c, err := r.copyTarget(ctx, id, dir)
	if err != nil {
		return err
	}
	if clean := path.Clean(dir); clean == CredentialMount || strings.HasPrefix(clean, CredentialMount+"/") {
		return shoal.FailedPrecondition("%s is under %s, shoal's own tmpfs for the providers' credentials as files: the node rewrites it, and a copy may not", dir, CredentialMount)
	}
	if c.tmpfs != "" {
		return r.tarExec(ctx, id, []string{"tar", "-x", "-f", "-", "-C", dir}, tar, io.Discard)
	}
	// A directory and a non-directory never replace each other
	// (noOverwriteDirNonDir, docker cp's default).
	if err := r.cli.CopyToContainer(ctx, id, enginePath(dir), tar, container.CopyToContainerOptions{}); err != nil {
		return r.copyErr(err, dir, c)
	}
	return nil
}

// CopyFrom reads p as a tar stream whose top-level entry is the stat's
// Name (p/. streams a directory's contents, under ".").
func (r *Runtime) CopyFrom(ctx context.Context, id, p string) (io.ReadCloser, shoal.PathStat, error) {
	c, err := r.copyTarget(ctx, id, p)
	if err != nil {
		return nil, shoal.PathStat{}, err
	}
	if c.tmpfs != "" {
		st, err := r.statExec(ctx, id, p)
		if err != nil {
			return nil, st, err
		}
		dir, base := path.Dir(path.Clean(p)), path.Base(path.Clean(p))
		if strings.HasSuffix(p, "/.") {
			dir, base = path.Clean(p), "."
		}
		st.Name = base
		// ./NAME: a name that begins with - is not an option.
		rc := r.tarReader(ctx, id, []string{"tar", "-c", "-f", "-", "-C", dir, "./" + base})
		return rc, st, nil
	}
	rc, st, err := r.cli.CopyFromContainer(ctx, id, enginePath(p))
	if err != nil {
		return nil, shoal.PathStat{}, r.copyErr(err, p, c)
	}
	return rc, shoal.PathStat{Name: st.Name, Size: st.Size, Mode: st.Mode, ModTime: st.Mtime, LinkTarget: st.LinkTarget}, nil
}

// enginePath is p as the engine's archive API takes it: "/" streams under
// the name "/" with absolute entries, "/." under ".".
func enginePath(p string) string {
	if path.Clean(p) == "/" {
		return "/."
	}
	return p
}

// kernelMounts are mounted by the OCI runtime into every container:
// the engine's archive calls see the empty directories beneath them, and
// would write there unseen.
var kernelMounts = []string{"/dev", "/proc", "/sys"}

// copyTarget is what a copy needs to know of its container.
type copyTarget struct {
	readOnly bool
	tmpfs    string   // the tmpfs mount p lies on, if any
	mounts   []string // every tmpfs mount
}

// copyTarget inspects the container: whether p lies on one of its tmpfs
// mounts (where only a running container can copy), whether its root is
// read-only.
func (r *Runtime) copyTarget(ctx context.Context, id, p string) (copyTarget, error) {
	ci, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return copyTarget{}, shoal.FailedPrecondition("the sandbox's container is gone")
		}
		if u := r.unreachable(err); u != err {
			return copyTarget{}, u
		}
		return copyTarget{}, fmt.Errorf("inspect container: %w", err)
	}
	var c copyTarget
	if ci.HostConfig != nil {
		c.readOnly = ci.HostConfig.ReadonlyRootfs
		for m := range ci.HostConfig.Tmpfs {
			c.mounts = append(c.mounts, path.Clean(m))
		}
		for _, m := range ci.HostConfig.Mounts {
			if m.Type == mount.TypeTmpfs {
				c.mounts = append(c.mounts, path.Clean(m.Target))
			}
		}
	}
	slices.Sort(c.mounts)
	clean := path.Clean(p)
	for _, m := range kernelMounts {
		if clean == m || strings.HasPrefix(clean, m+"/") {
			return c, shoal.FailedPrecondition("%s is under %s, which the container's runtime mounts in the container itself: no copy reaches it (docker cp does not either)", p, m)
		}
	}
	for _, m := range c.mounts {
		if clean == m || strings.HasPrefix(clean, m+"/") {
			c.tmpfs = m
		}
	}
	if c.tmpfs != "" && (ci.State == nil || !ci.State.Running || ci.State.Paused) {
		state := "not running"
		if ci.State != nil && ci.State.Paused {
			state = "paused"
		}
		return c, shoal.FailedPrecondition("%s is on %s, a tmpfs of the sandbox's: it exists only while the sandbox runs, and its container is %s", p, c.tmpfs, state)
	}
	return c, nil
}

// copyErr is the engine's refusal of a copy at p, as a typed error that
// names p.
func (r *Runtime) copyErr(err error, p string, c copyTarget) error {
	if u := r.unreachable(err); u != err {
		return u
	}
	text := daemonText(err)
	switch {
	case cerrdefs.IsNotFound(err):
		return shoal.NotFound("no such file or directory: %s", p)
	case strings.Contains(text, "rootfs is marked read-only"):
		where := "nothing in it is writable"
		if w := slices.DeleteFunc(slices.Clone(c.mounts), func(m string) bool { return m == CredentialMount }); len(w) > 0 {
			where = "only its tmpfs " + strings.Join(w, ", ") + " is writable, while it runs"
		}
		return shoal.FailedPrecondition("%s is on the sandbox's read-only root filesystem (created with --read-only): %s", p, where)
	case strings.Contains(text, "not a directory"):
		return shoal.FailedPrecondition("not a directory: %s", p)
	case strings.Contains(text, "cannot overwrite"):
		// The engine names its own paths (on the host): say what it
		// refused in the container's terms.
		return shoal.FailedPrecondition("a directory and a non-directory do not replace each other (under %s)", p)
	case cerrdefs.IsInvalidArgument(err) || cerrdefs.IsConflict(err) || cerrdefs.IsPermissionDenied(err):
		return shoal.FailedPrecondition("the engine refused the copy at %s: %s", p, text)
	}
	return fmt.Errorf("copy at %s: %w", p, err)
}

// statScript prints what is at $1 without following a link there: a
// type (N nothing, L link, D directory, F regular file, O other), its
// mode in octal, size and mtime, and a link's target on a second line.
const statScript = `p=$1
if [ -L "$p" ]; then t=L; elif [ -d "$p" ]; then t=D; elif [ -f "$p" ]; then t=F; elif [ -e "$p" ]; then t=O; else echo N; exit 0; fi
echo "$t $(stat -c '%a %s %Y' "$p")"
if [ $t = L ]; then readlink "$p"; fi`

// statExec is StatPath by a command in the running container (a tmpfs).
func (r *Runtime) statExec(ctx context.Context, id, p string) (shoal.PathStat, error) {
	out, err := r.runAs(ctx, id, "0:0", []string{"/bin/sh", "-c", statScript, "shoal-stat", p}, nil)
	if err != nil {
		return shoal.PathStat{}, err
	}
	lines := strings.SplitN(strings.TrimRight(out.stdout, "\n"), "\n", 2)
	f := strings.Fields(lines[0])
	if out.exitCode != 0 || len(f) == 0 {
		return shoal.PathStat{}, fmt.Errorf("stat %s in the sandbox: exit %d: %s", p, out.exitCode, strings.TrimSpace(out.stderr))
	}
	if f[0] == "N" {
		return shoal.PathStat{}, shoal.NotFound("no such file or directory: %s", p)
	}
	if len(f) != 4 {
		return shoal.PathStat{}, fmt.Errorf("stat %s in the sandbox answered %q", p, lines[0])
	}
	perm, err1 := strconv.ParseUint(f[1], 8, 32)
	size, err2 := strconv.ParseInt(f[2], 10, 64)
	mtime, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return shoal.PathStat{}, fmt.Errorf("stat %s in the sandbox answered %q", p, lines[0])
	}
	mode := fs.FileMode(perm & 0o777)
	for bit, m := range map[uint64]fs.FileMode{0o4000: fs.ModeSetuid, 0o2000: fs.ModeSetgid, 0o1000: fs.ModeSticky} {
		if perm&bit != 0 {
			mode |= m
		}
	}
	st := shoal.PathStat{Name: path.Base(path.Clean(p)), Size: size, ModTime: time.Unix(mtime, 0)}
	switch f[0] {
	case "L":
		st.Mode = mode | fs.ModeSymlink
		if len(lines) == 2 {
			st.LinkTarget = lines[1]
		}
	case "D":
		st.Mode = mode | fs.ModeDir
	case "F":
		st.Mode = mode
	default:
		st.Mode = mode | fs.ModeIrregular
	}
	if strings.HasSuffix(p, "/.") {
		st.Name = "."
	}
	return st, nil
}

// tarExec runs a tar command in the running container as root with stdin
// and stdout, and fails with its stderr if it exits nonzero.
func (r *Runtime) tarExec(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	spec := shoal.ExecSpec{Command: cmd, User: "0:0"}
	if stdin != nil {
		spec.Stdin = io.NopCloser(stdin)
	}
	var stderr bytes.Buffer
	res, err := r.Exec(ctx, id, spec, stdout, &limitWriter{w: &stderr, n: 4 << 10})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return shoal.FailedPrecondition("%s in the sandbox exited %d: %s", strings.Join(cmd[:2], " "), res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tarReader streams the output of a tar command in the running container;
// Close ends the command and waits for it.
func (r *Runtime) tarReader(ctx context.Context, id string, cmd []string) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(r.tarExec(ctx, id, cmd, nil, pw))
	}()
	return &execReader{PipeReader: pr, cancel: cancel, done: done}
}

type execReader struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *execReader) Close() error {
	e.cancel()
	e.PipeReader.Close()
	<-e.done
	return nil
}
