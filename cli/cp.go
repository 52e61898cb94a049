package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/tarcopy"
)

// sandbox cp: docker cp's syntax and rules (kubectl's NAME:PATH, with an
// optional WORKSPACE/), over CopyToSandbox and CopyFromSandbox. The local
// side is tarcopy's: Write makes the stream of a local source, Extract
// writes a sandbox's stream under a local directory and never outside it.

func (a *app) sandboxCp() *cli.Command {
	return &cli.Command{
		Name:      "cp",
		Usage:     "copy files and directories between a sandbox and the local filesystem",
		ArgsUsage: "SRC DST",
		Description: `One side is a sandbox's path, [WORKSPACE/]NAME:PATH (relative paths are
taken from /); the other a local path, or - for a tar stream on standard input
or output. Files, directories and symbolic links (copied as links) are copied
with their modes and mtimes (to the second), as docker cp copies them:

  shoal sandbox cp ./src agent:/work          # /work/src, or /work itself if it was missing
  shoal sandbox cp ./src/. agent:/work        # the contents of ./src into /work
  shoal sandbox cp agent:/work/out.json .
  shoal sandbox cp agent:/var/log - | tar t   # a tar stream on standard output
  tar c -C build . | shoal sandbox cp - agent:/work   # a tar stream into a directory

A missing destination takes the source's place under its own name; an
existing directory receives the source (SRC/.: its contents); a directory is
never copied onto a file. Files land owned by root in the sandbox, and by
you here; setuid and setgid bits are dropped on the way out, and an entry
the sandbox sends that would land outside the destination (an absolute
name, .., a path through a symbolic link) is not written: it is named on
stderr and the exit code is 1.

The copy streams, with no limit on its size; on a terminal a progress bar
shows once a few MB have moved (-q hides it). A stopped sandbox can be copied
to and from (a read-only sandbox's /tmp only while it runs). A missing source
exits 3 naming the path; a destination on a read-only root filesystem exits 4.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow-link", Aliases: []string{"L"}, Usage: "copy what a symbolic link at SRC points to, not the link"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q", "no-progress"}, Usage: "draw no progress bar (there is none unless stderr is a terminal)"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 2, "SRC DST"); err != nil {
				return err
			}
			src, err := a.cpArg(c.Args().Get(0))
			if err != nil {
				return err
			}
			dst, err := a.cpArg(c.Args().Get(1))
			if err != nil {
				return err
			}
			o := cpOptions{follow: c.Bool("follow-link"), quiet: c.Bool("quiet")}
			switch {
			case src.name != "" && dst.name != "":
				return usageError("sandbox cp copies between a sandbox and the local filesystem, not between two sandboxes: copy to a local path, then from it")
			case src.name == "" && dst.name == "":
				return usageError("sandbox cp needs a sandbox on one side: [WORKSPACE/]NAME:PATH (a local path with a colon starts with ./ or /)")
			case dst.name != "":
				return a.cpTo(c.Context, src.local, dst, o)
			}
			return a.cpFrom(c.Context, src, dst.local, o)
		},
	}
}

// cpRef is one side of a copy: a sandbox's path, or a local one ("-":
// a tar stream).
type cpRef struct {
	workspace, name, path string
	local                 string
}

func (r cpRef) String() string { return r.name + ":" + r.path }

type cpOptions struct{ follow, quiet bool }

// cpArg reads one side of a copy as docker cp does: NAME:PATH names a
// sandbox unless the argument starts with / or . (a local path with a
// colon).
func (a *app) cpArg(arg string) (cpRef, error) {
	if arg == "" {
		return cpRef{}, usageError("sandbox cp: an empty path")
	}
	ref, p, ok := strings.Cut(arg, ":")
	if !ok || arg == "-" || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") || ref == "" {
		return cpRef{local: arg}, nil
	}
	r := cpRef{workspace: a.workspace, name: ref, path: p}
	if w, n, ok := strings.Cut(ref, "/"); ok {
		r.workspace, r.name = w, n
	}
	if p == "" {
		return cpRef{}, usageError("%s: the path in the sandbox is empty (NAME:/ is its root)", arg)
	}
	if !strings.HasPrefix(p, "/") {
		r.path = "/" + p
	}
	return r, nil
}

// cpTo copies a local path (or the tar stream on stdin) into a sandbox.
func (a *app) cpTo(ctx context.Context, local string, dst cpRef, o cpOptions) error {
	start := &shoalv1.CopyToSandboxStart{Workspace: dst.workspace, Name: dst.name, Path: dst.path}
	var bar *cpBar
	var write func(io.Writer) error
	if local == "-" {
		if isTerminalFile(a.stdin) {
			return usageError("sandbox cp - reads a tar stream from standard input, which is a terminal: pipe one in (tar c -C DIR . | shoal sandbox cp - %s)", dst)
		}
		write = func(w io.Writer) error {
			_, err := io.Copy(w, a.stdin)
			if err != nil && !errors.Is(err, errCallEnded) {
				return fmt.Errorf("standard input: %w", err)
			}
			return err
		}
	} else {
		l, err := tarcopy.Resolve(local, o.follow)
		if err != nil {
			return localErr(local, err)
		}
		start.SourceName, start.SourceDir = l.Name, l.Dir
		if bar = a.newCpBar(o, "to "+dst.String()); bar != nil {
			if n, err := l.Size(); err == nil {
				bar.total = n
			}
		}
		write = func(w io.Writer) error {
			_, err := tarcopy.Write(w, l, tarcopy.WriteOptions{Skipped: a.cpSkipped, Read: bar.add})
			return err
		}
	}
	api, err := a.api()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.CopyToSandbox(ctx)
	if err != nil {
		return err
	}
	w := &cpSender{stream: stream}
	err = stream.Send(&shoalv1.CopyToSandboxInput{Input: &shoalv1.CopyToSandboxInput_Start{Start: start}})
	if err == nil {
		err = write(w)
		if err == nil {
			err = w.flush()
		}
	}
	if errors.Is(err, io.EOF) {
		err = errCallEnded // the start's Send
	}
	if err != nil && !errors.Is(err, errCallEnded) {
		// Failed here: the node must not take what it has for the whole
		// stream, so the call is cancelled, not closed.
		cancel()
		bar.abort()
		return &exitError{code: ExitError, msg: fmt.Sprintf("copy to %s failed: %v", dst, err),
			hint: "what was sent before the failure was written in the sandbox"}
	}
	// errCallEnded: the node ended the call; its status says why.
	resp, err := stream.CloseAndRecv()
	if err != nil {
		bar.abort()
		return a.cpErr(err, dst)
	}
	bar.done(fmt.Sprintf("copied %s to %s:%s", sizeText(resp.Bytes), dst.name, resp.Path))
	return nil
}

// cpSender sends a copy's stream in messages of 1 MiB.
type cpSender struct {
	stream shoalv1.Shoal_CopyToSandboxClient
	buf    []byte
}

const cpChunk = 1 << 20

func (s *cpSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if s.buf == nil {
			s.buf = make([]byte, 0, cpChunk)
		}
		k := min(len(p), cpChunk-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == cpChunk {
			if err := s.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (s *cpSender) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	b := s.buf
	s.buf = nil // a sent message is never written again
	err := s.stream.Send(&shoalv1.CopyToSandboxInput{Input: &shoalv1.CopyToSandboxInput_Data{Data: b}})
	if errors.Is(err, io.EOF) {
		return errCallEnded
	}
	return err
}

// errCallEnded: a send found the call ended by the node (its status says
// why), not a failure here.
var errCallEnded = errors.New("the node ended the copy")

// cpFrom copies a sandbox's path to a local one (or as a tar stream to
// stdout).
func (a *app) cpFrom(ctx context.Context, src cpRef, local string, o cpOptions) error {
	api, err := a.api()
	if err != nil {
		return err
	}
	if local == "-" && isTerminalFile(a.stdout) {
		// As tar does: a tar stream is no sight for a terminal.
		return usageError("sandbox cp %s - writes a tar stream to standard output, which is a terminal: redirect it, or give a local path", src)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.CopyFromSandbox(ctx, &shoalv1.CopyFromSandboxRequest{Workspace: src.workspace, Name: src.name, Path: src.path, FollowLink: o.follow})
	if err != nil {
		return a.cpErr(err, src)
	}
	first, err := stream.Recv()
	if err != nil {
		return a.cpErr(err, src)
	}
	st := first.GetStat()
	if st == nil || !tarcopy.ValidSourceName(st.Name) {
		return fmt.Errorf("the node's answer does not start with what %s is", src)
	}
	r := &cpReceiver{stream: stream}
	if local == "-" {
		if _, err := io.Copy(a.stdout, r); err != nil {
			return a.cpErr(err, src)
		}
		return nil
	}
	source := tarcopy.Source{Name: st.Name, Dir: st.Type == shoalv1.FileType_FILE_TYPE_DIRECTORY}
	dst, err := localDest(local)
	if err != nil {
		return err
	}
	place, err := tarcopy.Place(source, dst)
	if err != nil {
		return localPlaceErr(dst, err)
	}
	bar := a.newCpBar(o, "from "+src.String())
	if st.Type == shoalv1.FileType_FILE_TYPE_REGULAR {
		bar.setTotal(st.Size)
	}
	xs, err := tarcopy.Extract(r, filepath.FromSlash(place.Dir), st.Name, place.Rename, tarcopy.ExtractOptions{Skipped: a.cpSkipped, Wrote: bar.add})
	if err == nil {
		// What follows the archive's end (padding), and the call's status.
		_, err = io.Copy(io.Discard, r)
	}
	if err != nil {
		bar.abort()
		return a.cpErr(err, src)
	}
	landed := filepath.FromSlash(place.Landed(source))
	if xs.Unsafe > 0 {
		bar.abort()
		return &exitError{code: ExitError, msg: fmt.Sprintf("%d entries that %s sent were not written: they would have landed outside %s (named above)", xs.Unsafe, src, landed),
			hint: "a sandbox's files are untrusted: look at what it holds there (shoal sandbox exec ... -- ls -la)"}
	}
	bar.done(fmt.Sprintf("copied %s from %s to %s", sizeText(xs.Bytes), src, landed))
	return nil
}

// cpReceiver reads the tar stream of a CopyFromSandbox call: the data of
// the chunks after the first, until the call's end (io.EOF); a call that
// broke is its error.
type cpReceiver struct {
	stream shoalv1.Shoal_CopyFromSandboxClient
	buf    []byte
}

func (r *cpReceiver) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		m, err := r.stream.Recv()
		if err != nil {
			return 0, err
		}
		r.buf = m.Data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// localDest finds what a local destination is, as docker cp does:
// symbolic links at its end are followed (what they point to need not
// exist), and a missing destination's directory must exist.
func localDest(p string) (tarcopy.Dest, error) {
	cur := p
	for hops := 0; ; hops++ {
		fi, err := os.Lstat(cur)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if hops == 16 {
				return tarcopy.Dest{}, &exitError{code: ExitError, msg: fmt.Sprintf("%s: too many symbolic links", p)}
			}
			t, err := os.Readlink(cur)
			if err != nil {
				return tarcopy.Dest{}, err
			}
			if !filepath.IsAbs(t) {
				t = filepath.Join(filepath.Dir(filepath.Clean(cur)), t)
			}
			cur = t
			continue
		}
		d := tarcopy.Dest{Path: filepath.ToSlash(cur)}
		if err == nil {
			if !fi.IsDir() && !fi.Mode().IsRegular() {
				return d, &exitError{code: ExitPrecondition, msg: fmt.Sprintf("%s is not a directory or a regular file: a copy cannot land there", p)}
			}
			d.Exists, d.Dir = true, fi.IsDir()
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return d, err
		}
		parent := filepath.Dir(filepath.Clean(cur))
		pfi, err := os.Stat(parent)
		if err != nil {
			return d, localErr(parent, err)
		}
		if !pfi.IsDir() {
			return d, &exitError{code: ExitPrecondition, msg: fmt.Sprintf("not a directory: %s", parent)}
		}
		return d, nil
	}
}

// localPlaceErr names why docker cp's rules refuse a local destination.
func localPlaceErr(dst tarcopy.Dest, err error) error {
	p := filepath.FromSlash(dst.Path)
	switch {
	case errors.Is(err, tarcopy.ErrNoDir):
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no such directory: %s", p), hint: "make it first, or leave out the trailing /"}
	case errors.Is(err, tarcopy.ErrDirOnFile):
		return &exitError{code: ExitPrecondition, msg: fmt.Sprintf("cannot copy a directory onto the file %s", p)}
	}
	return err
}

// localErr is a local path's error with the exit code a script can use:
// 3 for a path that is not there.
func localErr(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no such file or directory: %s", p)}
	case errors.Is(err, tarcopy.ErrNotDir):
		return &exitError{code: ExitPrecondition, msg: fmt.Sprintf("not a directory: %s", p)}
	}
	return &exitError{code: ExitError, msg: err.Error()}
}

// cpErr gives a copy's errors from the node the hints a copy needs (ref
// is its sandbox side); the rest are classified as any call's.
func (a *app) cpErr(err error, ref cpRef) error {
	st, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, tarcopy.ErrTruncated), errors.Is(err, tarcopy.ErrNotTar):
			return &exitError{code: ExitError, msg: "the copy's stream from the sandbox broke: " + err.Error()}
		}
		return err
	}
	msg := st.Message()
	switch {
	case st.Code() == codes.NotFound && strings.Contains(msg, "no such "):
		return &exitError{code: ExitNotFound, msg: msg, hint: fmt.Sprintf("`shoal sandbox exec %s -- ls -la %s` shows what the sandbox has there", ref.name, path.Dir(path.Clean(ref.path)))}
	case st.Code() == codes.FailedPrecondition && strings.Contains(msg, "read-only root filesystem"):
		return &exitError{code: ExitPrecondition, msg: msg, hint: "copy under its tmpfs (/tmp) while it runs, or create the sandbox without --read-only"}
	}
	return err
}

// cpSkipped reports an entry left out of a copy.
func (a *app) cpSkipped(name, why string) {
	// Names come from the sandbox: never raw on a terminal.
	fmt.Fprintf(a.stderr, "warning: skipped %q: %s\n", name, strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, why))
}

// cpShowAfter: a copy's progress bar shows once this much has moved.
const cpShowAfter = 4 << 20

// cpBar is a copy's progress on a terminal: nothing until cpShowAfter
// bytes have moved (a small copy draws nothing), then a bar with the
// bytes, the rate, and the total when it is known. Its methods do nothing
// on a nil cpBar (no terminal, or -q).
type cpBar struct {
	a     *app
	what  string
	total int64 // -1: unknown
	n     int64
	start time.Time
	bar   *progressbar.ProgressBar
}

func (a *app) newCpBar(o cpOptions, what string) *cpBar {
	if o.quiet || !a.tty {
		return nil
	}
	return &cpBar{a: a, what: what, total: -1, start: time.Now()}
}

func (b *cpBar) setTotal(n int64) {
	if b != nil {
		b.total = n
	}
}

func (b *cpBar) add(n int) {
	if b == nil {
		return
	}
	b.n += int64(n)
	if b.bar == nil {
		if b.n < cpShowAfter {
			return
		}
		b.bar = progressbar.NewOptions64(b.total,
			progressbar.OptionSetWriter(b.a.stderr),
			progressbar.OptionSetDescription("copying "+b.what),
			progressbar.OptionShowBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		_ = b.bar.Add64(b.n)
		return
	}
	_ = b.bar.Add(n)
}

// done ends the bar and, if it showed, says what was copied.
func (b *cpBar) done(summary string) {
	if b == nil || b.bar == nil {
		return
	}
	_ = b.bar.Finish()
	d := time.Since(b.start)
	fmt.Fprintf(b.a.stderr, "%s in %s (%s/s)\n", summary, d.Round(100*time.Millisecond), sizeText(int64(float64(b.n)/d.Seconds())))
}

// abort clears the bar before an error is printed.
func (b *cpBar) abort() {
	if b == nil || b.bar == nil {
		return
	}
	_ = b.bar.Clear()
}

// sizeText is n bytes in binary units: 512 B, 3.4 MiB, 1.0 GiB.
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// isTerminalFile reports whether f is a terminal.
func isTerminalFile(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
