package cli_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/internal/testenv"
)

// The tree TestCopyThroughANonOwner round-trips: the 10,000 files,
// 200 MiB.
const (
	cpTreeFiles = 10_000
	cpTreeBytes = 200 << 20
)

// makeTree writes a tree of files regular files in 100 directories, bytes
// in total (20 large files and many small ones), with symbolic links
// (relative and pointing out), modes and mtimes of its own, and returns
// its top.
func makeTree(t *testing.T, files int, bytes int64) string {
	t.Helper()
	top := filepath.Join(t.TempDir(), "tree")
	rng := rand.New(rand.NewPCG(1, 2))
	data := rand.NewChaCha8([32]byte{42})
	t0 := time.Date(2024, 2, 3, 4, 5, 6, 0, time.UTC)
	const big = 20
	small := files - big
	var left = bytes
	sizes := make([]int64, files)
	for i := range small {
		sizes[i] = rng.Int64N(20 << 10)
		left -= sizes[i]
	}
	if left < big {
		t.Fatalf("makeTree: %d files of up to 20 KiB already take more than %d bytes", small, bytes)
	}
	for i := small; i < files; i++ {
		sizes[i] = left / big
	}
	sizes[files-1] += left % big
	for i, size := range sizes {
		dir := filepath.Join(top, fmt.Sprintf("d%02d", i%100))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("f%05d", i))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(f, data, size); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		mode := fs.FileMode(0o644)
		switch {
		case i%7 == 0:
			mode = 0o755
		case i%11 == 0:
			mode = 0o600
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		mt := t0.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		target := fmt.Sprintf("../d%02d/f%05d", (i+1)%100, i+1)
		if i%2 == 1 {
			target = "/etc/passwd"
		}
		if err := os.Symlink(target, filepath.Join(top, fmt.Sprintf("d%02d", i), "link")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		d := filepath.Join(top, fmt.Sprintf("d%02d", i))
		if i%10 == 0 {
			os.Chmod(d, 0o700)
		}
		mt := t0.Add(-time.Duration(i) * time.Hour)
		os.Chtimes(d, mt, mt)
	}
	os.Chtimes(top, t0, t0)
	return top
}

// treeSum is the sha256 of a canonical tar of dir: entries in lexical
// order, each with its relative name, type, permission bits, mtime to the
// second, link target and content; no owners.
func treeSum(t *testing.T, dir string) (sum string, files int, size int64) {
	t.Helper()
	h := sha256.New()
	tw := tar.NewWriter(h)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Truncate(time.Second), Format: tar.FormatPAX}
		var src *os.File
		switch m := fi.Mode(); {
		case m.IsDir():
			hdr.Typeflag = tar.TypeDir
		case m&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			if src, err = os.Open(p); err != nil {
				return err
			}
			defer src.Close()
			files++
			size += fi.Size()
		default:
			return fmt.Errorf("%s: unexpected %v", p, m)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if src != nil {
			_, err = io.Copy(tw, src)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), files, size
}

// runLong runs the binary like run, with a longer deadline, and says how
// long it took.
func runLong(t *testing.T, bin, endpoint string, args ...string) (result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SHOAL_ENDPOINT=" + endpoint}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}, took
}

// sandbox cp through a node that does not own the sandbox, on a cluster
// of three with an engine each (only the owner's engine has the
// container): the tree of 10,000 files and 200 MiB goes in and
// comes back byte for byte (the sha256 of a canonical tar of each side:
// names, types, modes, mtimes, link targets, contents), and nothing is
// printed when stderr is not a terminal.
func TestCopyThroughANonOwner(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	if !c.SeparateEngines() {
		t.Log("the nodes share one engine here: forwarding is exercised, engine separation is not")
	}
	front := c.Addr(0)
	run(t, bin, front, "sandbox", "create", "far", "--node", c.ID(2), "--wait").must(t, 0, "sandbox create on node 2")

	src := makeTree(t, cpTreeFiles, cpTreeBytes)
	want, files, size := treeSum(t, src)
	if files != cpTreeFiles || size != cpTreeBytes {
		t.Fatalf("the tree has %d files, %d bytes", files, size)
	}
	r, in := runLong(t, bin, front, "sandbox", "cp", src, "far:/data")
	r.must(t, 0, "sandbox cp of the tree into the sandbox")
	if r.stdout != "" || r.stderr != "" {
		t.Fatalf("a copy with no terminal printed %q, %q", r.stdout, r.stderr)
	}
	back := filepath.Join(t.TempDir(), "back")
	r, out := runLong(t, bin, front, "sandbox", "cp", "far:/data", back)
	r.must(t, 0, "sandbox cp of the tree out of the sandbox")
	got, gotFiles, gotSize := treeSum(t, back)
	if got != want {
		t.Fatalf("the tree came back different: sha256 %s, sent %s (%d files, %d bytes back)", got, want, gotFiles, gotSize)
	}
	t.Logf("%d files, %d MiB through a non-owner: in %s (%.1f MiB/s), out %s (%.1f MiB/s); sha256 of the tree's tar %s both ways",
		files, size>>20, in.Round(time.Millisecond), float64(size>>20)/in.Seconds(), out.Round(time.Millisecond), float64(size>>20)/out.Seconds(), want)
	// The sandbox has them too, counted where they are.
	r = run(t, bin, front, "sandbox", "exec", "far", "--", "sh", "-c", "find /data -type f | wc -l; find /data -type l | wc -l").must(t, 0, "count in the sandbox")
	if strings.Fields(r.stdout)[0] != fmt.Sprint(cpTreeFiles) || strings.Fields(r.stdout)[1] != "20" {
		t.Fatalf("the sandbox holds %q files and links", r.stdout)
	}
}

// sandbox cp's syntax and errors through the built binary, through a
// non-owner: docker cp's DIR vs DIR/., - as a tar stream either way,
// [WORKSPACE/]NAME:PATH and -w, a missing source (3, naming it), a
// read-only root (4, naming the path; its /tmp copied while it runs), a
// sandbox whose command ended and one stopped with sandbox stop, both ways
// (the files there once it starts again), links that point out of the destination
// never written through, the progress bar on a terminal only, and an owner
// killed in the middle of a copy (5, naming it).
func TestCopyCLI(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 2})
	front, owner := c.Addr(0), c.ID(1)
	run(t, bin, front, "sandbox", "create", "far", "--node", owner, "--wait").must(t, 0, "sandbox create on node 1")
	local := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	inSandbox := func(name, line string) string {
		t.Helper()
		return run(t, bin, front, "sandbox", "exec", name, "--", "sh", "-c", line).must(t, 0, line).stdout
	}
	src := filepath.Join(local, "src")
	must(os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "sub", "b.txt"), []byte("beta\n"), 0o600))

	// DIR to a missing path, DIR into a directory, DIR/. into one.
	run(t, bin, front, "sandbox", "cp", src, "far:/x").must(t, 0, "cp DIR to a missing path")
	run(t, bin, front, "sandbox", "cp", src, "far:x").must(t, 0, "cp DIR into a directory (a path relative to /)")
	run(t, bin, front, "sandbox", "cp", src+"/.", "far:/y/").must(t, 0, "cp DIR/. to a missing path ending in /")
	if got := inSandbox("far", "cd /x && find . | sort; cd /y && find . | sort"); got != ".\n./a.txt\n./src\n./src/a.txt\n./src/sub\n./src/sub/b.txt\n./sub\n./sub/b.txt\n.\n./a.txt\n./sub\n./sub/b.txt\n" {
		t.Fatalf("DIR and DIR/. landed as:\n%s", got)
	}
	// A file out, onto a local file and into a directory; a link as a
	// link.
	inSandbox("far", "ln -s /etc/hostname /x/link")
	run(t, bin, front, "sandbox", "cp", "far:/x/sub/b.txt", filepath.Join(local, "a-copy")).must(t, 0, "cp a file out")
	run(t, bin, front, "sandbox", "cp", "far:/x/a.txt", filepath.Join(local, "a-copy")).must(t, 0, "cp a file onto a file")
	run(t, bin, front, "sandbox", "cp", "far:/x/link", local).must(t, 0, "cp a link out")
	if b, _ := os.ReadFile(filepath.Join(local, "a-copy")); string(b) != "alpha\n" {
		t.Fatalf("a file onto a file: %q", b)
	}
	if l, err := os.Readlink(filepath.Join(local, "link")); err != nil || l != "/etc/hostname" {
		t.Fatalf("a link copied out: %q %v", l, err)
	}
	// - : a tar stream in, into a directory; out, on stdout.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	must(tw.WriteHeader(&tar.Header{Name: "streamed/in.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}))
	_, err := tw.Write([]byte("in\n"))
	must(err)
	must(tw.Close())
	runWith(t, bin, front, runOpts{stdin: tb.String()}, "sandbox", "cp", "-", "far:/x").must(t, 0, "cp - into a directory")
	if got := inSandbox("far", "cat /x/streamed/in.txt; stat -c %Y /x/streamed/in.txt"); got != "in\n1700000000\n" {
		t.Fatalf("a tar stream's file: %q", got)
	}
	runWith(t, bin, front, runOpts{stdin: tb.String()}, "sandbox", "cp", "-", "far:/x/a.txt").must(t, 4, "cp - onto a file")
	r := run(t, bin, front, "sandbox", "cp", "far:/x/sub", "-").must(t, 0, "cp to -")
	var names []string
	for tr := tar.NewReader(strings.NewReader(r.stdout)); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "sub/ sub/b.txt" {
		t.Fatalf("cp to - wrote the entries %q", names)
	}

	// Workspaces: WORKSPACE/NAME:PATH, and -w.
	run(t, bin, front, "sandbox", "cp", filepath.Join(src, "a.txt"), "default/far:/ws.txt").must(t, 0, "cp to WORKSPACE/NAME:PATH")
	r = run(t, bin, front, "sandbox", "cp", "-w", "other", filepath.Join(src, "a.txt"), "far:/ws.txt").must(t, 3, "cp -w other (no far there)")
	if !strings.Contains(r.stderr, "far") {
		t.Fatalf("cp into a sandbox of another workspace: %q", r.stderr)
	}

	// A missing source, either side: 3 naming it. Usage: 2.
	r = run(t, bin, front, "sandbox", "cp", "far:/no/such", local).must(t, 3, "cp of a missing path in the sandbox")
	if !strings.Contains(r.stderr, "/no/such") {
		t.Fatalf("a missing source in the sandbox: %q", r.stderr)
	}
	r = run(t, bin, front, "sandbox", "cp", filepath.Join(local, "nope"), "far:/").must(t, 3, "cp of a missing local path")
	if !strings.Contains(r.stderr, filepath.Join(local, "nope")) {
		t.Fatalf("a missing local source: %q", r.stderr)
	}
	run(t, bin, front, "sandbox", "cp", "ghost:/etc", local).must(t, 3, "cp from a missing sandbox")
	for _, args := range [][]string{{src, local}, {"far:/x", "far:/y"}, {"far:", local}, {src}} {
		if r := run(t, bin, front, append([]string{"sandbox", "cp"}, args...)...); r.code != 2 {
			t.Errorf("cp %q: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}

	// A read-only root: 4, naming the path; its /tmp while it runs.
	run(t, bin, front, "sandbox", "create", "ro", "--read-only", "--node", owner, "--wait").must(t, 0, "create a read-only sandbox")
	r = run(t, bin, front, "sandbox", "cp", filepath.Join(src, "a.txt"), "ro:/etc/").must(t, 4, "cp onto a read-only root")
	if !strings.Contains(r.stderr, "/etc/") || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("cp onto a read-only root: %q", r.stderr)
	}
	run(t, bin, front, "sandbox", "cp", src, "ro:/tmp").must(t, 0, "cp into a read-only sandbox's /tmp")
	run(t, bin, front, "sandbox", "cp", "ro:/tmp/src/sub/b.txt", filepath.Join(local, "from-ro")).must(t, 0, "cp out of a read-only sandbox's /tmp")
	if b, _ := os.ReadFile(filepath.Join(local, "from-ro")); string(b) != "beta\n" {
		t.Fatalf("out of a read-only sandbox's /tmp: %q", b)
	}

	// A stopped sandbox: both ways.
	run(t, bin, front, "sandbox", "create", "job", "--node", owner, "--wait", "--", "sh", "-c", "echo done > /result").must(t, 0, "create a sandbox whose command ends")
	if r := run(t, bin, front, "sandbox", "get", "job"); !strings.Contains(r.stdout, "STOPPED") {
		t.Fatalf("job is not STOPPED:\n%s", r.stdout)
	}
	run(t, bin, front, "sandbox", "cp", "job:/result", filepath.Join(local, "result")).must(t, 0, "cp out of a stopped sandbox")
	run(t, bin, front, "sandbox", "cp", filepath.Join(local, "result"), "job:/result.back").must(t, 0, "cp into a stopped sandbox")
	run(t, bin, front, "sandbox", "cp", "job:/result.back", filepath.Join(local, "result.back")).must(t, 0, "cp what was copied into a stopped sandbox")
	if b, _ := os.ReadFile(filepath.Join(local, "result.back")); string(b) != "done\n" {
		t.Fatalf("a stopped sandbox's file, copied in and out: %q", b)
	}

	// A sandbox stopped with sandbox stop: files go in and out while it is
	// STOPPED, and are there when it runs again (the same container).
	run(t, bin, front, "sandbox", "create", "st", "--node", owner, "--wait").must(t, 0, "create st")
	run(t, bin, front, "sandbox", "stop", "st", "--grace", "0", "--wait").must(t, 0, "stop st")
	run(t, bin, front, "sandbox", "cp", src, "st:/kept").must(t, 0, "cp into a stopped sandbox")
	run(t, bin, front, "sandbox", "cp", "st:/kept/a.txt", filepath.Join(local, "kept.txt")).must(t, 0, "cp out of a stopped sandbox")
	run(t, bin, front, "sandbox", "start", "st", "--wait").must(t, 0, "start st")
	if got := inSandbox("st", "cat /kept/a.txt /kept/sub/b.txt"); got != "alpha\nbeta\n" {
		t.Fatalf("files copied into a stopped sandbox, once it runs again: %q", got)
	}

	// Links the sandbox made to point out of the destination: copied as
	// links, never written through. The second copy would write through
	// the first's link: refused (1), and the directory it points to
	// stays empty.
	outside := filepath.Join(local, "outside")
	must(os.Mkdir(outside, 0o755))
	inSandbox("far", fmt.Sprintf("mkdir -p /h1 /h2/out && ln -s %s /h1/out && ln -s ../../../.. /h1/up && echo pwned > /h2/out/planted", outside))
	dst := filepath.Join(local, "dst")
	run(t, bin, front, "sandbox", "cp", "far:/h1", dst).must(t, 0, "cp links that point out")
	if l, _ := os.Readlink(filepath.Join(dst, "out")); l != outside {
		t.Fatalf("the link came out as %q", l)
	}
	r = run(t, bin, front, "sandbox", "cp", "far:/h2/.", dst).must(t, 1, "cp through a link that points out")
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Fatalf("a copy wrote through a link to outside its destination: %v", ents)
	}
	t.Logf("cp through a link out: %s", strings.TrimSpace(r.stderr))

	// Progress: a bar on a terminal for a copy over a few MB, none with
	// -q, none when piped (the runs above printed nothing).
	big := filepath.Join(local, "big")
	f, err := os.Create(big)
	must(err)
	_, err = io.CopyN(f, rand.NewChaCha8([32]byte{1}), 32<<20)
	must(err)
	must(f.Close())
	p := startPTY(t, bin, front, "sandbox", "cp", big, "far:/big")
	if code := p.wait(); code != 0 {
		t.Fatalf("cp on a terminal: exit %d:\n%s", code, p.output())
	}
	p.expect(0, "copying to far:/big")
	p.expect(0, "copied 32.0 MiB to far:/big")
	t.Logf("cp of 32 MiB on a terminal ended with %q", p.output()[strings.LastIndex(p.output(), "copied"):])
	q := startPTY(t, bin, front, "sandbox", "cp", "-q", "far:/big", filepath.Join(local, "big.back"))
	if code := q.wait(); code != 0 {
		t.Fatalf("cp -q on a terminal: exit %d:\n%s", code, q.output())
	}
	if out := q.output(); out != "" {
		t.Fatalf("cp -q on a terminal showed %q", out)
	}
	// A tar stream is neither read from nor written to a terminal.
	for _, args := range [][]string{{"-", "far:/x"}, {"far:/x", "-"}} {
		p := startPTY(t, bin, front, append([]string{"sandbox", "cp"}, args...)...)
		if code := p.wait(); code != 2 {
			t.Fatalf("cp %q on a terminal: exit %d, want 2:\n%s", args, code, p.output())
		}
		p.expect(0, "is a terminal")
	}

	// The owner is killed in the middle of a copy into its sandbox: the
	// client's error names it (5), not the node it dialed.
	cmd := exec.Command(bin, "sandbox", "cp", "-", "far:/tmp")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SHOAL_ENDPOINT=" + front}
	stdin, err := cmd.StdinPipe()
	must(err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	must(cmd.Start())
	tw = tar.NewWriter(stdin)
	must(tw.WriteHeader(&tar.Header{Name: "endless", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg}))
	fill := rand.NewChaCha8([32]byte{2})
	_, err = io.CopyN(tw, fill, 16<<20)
	must(err)
	c.Kill(1)
	// Writes go on until the client exits (then they fail).
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.Copy(stdin, fill)
	}()
	werr := cmd.Wait() // closes stdin once the client has exited
	<-wrote
	code := 0
	if ee, ok := werr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	want := fmt.Sprintf("owner node %s went away during the copy (served by node %s)", owner, c.ID(0))
	if code != 5 || !strings.Contains(errb.String(), want) {
		t.Fatalf("a copy whose owner was killed: exit %d, stderr %q; want 5 and %q", code, errb.String(), want)
	}
}
