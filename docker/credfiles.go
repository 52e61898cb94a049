package docker

import (
	"archive/tar"
	"bytes"
	"context"

	"io"
	"maps"
	"slices"
	"strings"

	"shoal"
)

// CredentialMount is the tmpfs every sandbox container gets (in memory,
// never on the host's disk) for its providers' credentials as files:
// CredentialDir/<provider>/<KEY>, one file per credential holding its
// value, mode 0444, root's.
const (
	CredentialMount = "/run/shoal"
	CredentialDir   = CredentialMount + "/providers"
)

// credentialScript installs the files of the tar on its stdin as the new
// contents of CredentialDir, all at once: it unpacks them into a fresh
// directory beside it, then swaps the symlink CredentialDir to that
// directory with one rename (mv -T), as Kubernetes does for a secret
// volume, so a reader sees the old set or the new one, never a mix or a
// partly written file; then it removes the old directory. It refuses to
// write anywhere but a tmpfs at CredentialMount (a container made before
// shoal mounted one would put the files on the host's disk). Exit 3 says
// there is no tmpfs.
const credentialScript = `set -e
m=` + CredentialMount + `
grep -q " $m tmpfs " /proc/mounts || exit 3
umask 022
new=$(mktemp -d "$m/..data.XXXXXX")
trap 'rm -rf "$new"' EXIT
tar -x -C "$new" -f -
chmod -R a-w,a+rX "$new"
chmod 0755 "$new"
old=$(readlink "$m/providers" 2>/dev/null || true)
rm -f "$m/..link"
ln -s "$(basename "$new")" "$m/..link"
mv -Tf "$m/..link" "$m/providers"
trap - EXIT
if [ -n "$old" ] && [ "$old" != "$(basename "$new")" ]; then rm -rf "$m/$old"; fi
`

// WriteCredentialFiles replaces the credential files of a running
// container with files (provider → key → value): an exec of sh as root
// that reads them as a tar on its stdin, so no value is ever on a command
// line, in the engine's events or in an error. The image needs sh, tar,
// mktemp, readlink, ln and mv -T (busybox or coreutils have them).
func (r *Runtime) WriteCredentialFiles(ctx context.Context, id string, files map[string]map[string]string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755}); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(files[p])) {
			v := files[p][k]
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p + "/" + k, Mode: 0o444, Size: int64(len(v))}); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, v); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	var stderr strings.Builder
	res, err := r.Exec(ctx, id, shoal.ExecSpec{Command: []string{"sh", "-c", credentialScript}, User: "0:0", Stdin: io.NopCloser(&buf)},
		io.Discard, &limitedBuilder{b: &stderr, n: 512})
	if err != nil {
		return err
	}
	switch res.ExitCode {
	case 0:
		return nil
	case 3:
		return shoal.FailedPrecondition("the container has no tmpfs at %s (it was made by an older shoal): the credentials are not written as files; delete the sandbox and create it again", CredentialMount)
	}
	return shoal.FailedPrecondition("writing the credential files in the container failed (exit %d): %s", res.ExitCode, strings.TrimSpace(stderr.String()))
}

// limitedBuilder keeps the first n bytes written to it.
type limitedBuilder struct {
	b *strings.Builder
	n int
}

func (l *limitedBuilder) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
