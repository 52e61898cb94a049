package tarcopy_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"shoal/tarcopy"
)

// tree makes a source tree with every kind of entry a copy carries.
func tree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	t0 := time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub", "empty"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha"), 0o640))
	must(os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "sub", strings.Repeat("long", 40)), []byte("a long name"), 0o600))
	must(os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "sub", "hard")))
	must(os.Symlink("../a.txt", filepath.Join(src, "sub", "rel")))
	must(os.Symlink("/etc/hostname", filepath.Join(src, "abs")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(os.Chmod(filepath.Join(src, "sub", "empty"), 0o700))
	for i, p := range []string{"a.txt", "sub/run.sh", "sub/empty", "sub", "fifo", "."} {
		must(os.Chtimes(filepath.Join(src, p), t0, t0.Add(time.Duration(i)*time.Minute)))
	}
	return src
}

// canon is a tree's canonical description: each entry's relative name,
// type, mode, mtime to the second, link target and content.
func canon(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + fi.Mode().String() + " ")
		b.WriteString(fi.ModTime().UTC().Truncate(time.Second).Format(time.RFC3339) + " ")
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			b.WriteString("-> " + l)
		case fi.Mode().IsRegular():
			c, _ := os.ReadFile(p)
			b.WriteString(string(c))
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				b.WriteString(" links=" + strconv.FormatUint(uint64(st.Nlink), 10))
			}
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// copyLocal copies src to dst through a stream, as `shoal sandbox cp`
// would through a sandbox: Resolve, Write, Place, Extract.
func copyLocal(t *testing.T, src, dst string) (tarcopy.Placement, error) {
	t.Helper()
	l, err := tarcopy.Resolve(src, false)
	if err != nil {
		return tarcopy.Placement{}, err
	}
	var buf bytes.Buffer
	if _, err := tarcopy.Write(&buf, l, tarcopy.WriteOptions{}); err != nil {
		return tarcopy.Placement{}, err
	}
	d := tarcopy.Dest{Path: filepath.ToSlash(dst)}
	if fi, err := os.Stat(dst); err == nil {
		d.Exists, d.Dir = true, fi.IsDir()
	}
	p, err := tarcopy.Place(l.Source, d)
	if err != nil {
		return p, err
	}
	var skipped []string
	st, err := tarcopy.Extract(&buf, filepath.FromSlash(p.Dir), l.Name, p.Rename, tarcopy.ExtractOptions{Skipped: func(n, why string) { skipped = append(skipped, n+": "+why) }})
	if err == nil && st.Unsafe+st.Unsupported > 0 {
		t.Fatalf("a local tree's copy skipped %q", skipped)
	}
	return p, err
}

// A tree round-trips: files, modes, mtimes, empty and private directories,
// symbolic links as links, hard links as links, a named pipe, a long name;
// and DIR vs DIR/. land as docker cp lands them.
func TestRoundTrip(t *testing.T) {
	src := tree(t)
	want := canon(t, src)
	out := t.TempDir()

	// To a missing destination: made, with the source's contents.
	if _, err := copyLocal(t, src, filepath.Join(out, "new")); err != nil {
		t.Fatal(err)
	}
	if got := canon(t, filepath.Join(out, "new")); got != want {
		t.Fatalf("copied tree:\n%s\nwant:\n%s", got, want)
	}
	// Into an existing directory: under its own name; DIR/.: the
	// contents.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(out, "into"), 0o755))
	_, err := copyLocal(t, src, filepath.Join(out, "into"))
	must(err)
	if got := canon(t, filepath.Join(out, "into", "src")); got != want {
		t.Fatalf("DIR into a directory:\n%s\nwant:\n%s", got, want)
	}
	must(os.Mkdir(filepath.Join(out, "contents"), 0o755))
	_, err = copyLocal(t, src+"/.", filepath.Join(out, "contents"))
	must(err)
	if _, err := os.Stat(filepath.Join(out, "contents", "a.txt")); err != nil {
		t.Fatalf("DIR/. into a directory: %v", err)
	}
	// A file onto a file, a symbolic link as a link, a directory onto a
	// file refused, a missing source named.
	_, err = copyLocal(t, filepath.Join(src, "a.txt"), filepath.Join(out, "contents", "sub", "run.sh"))
	must(err)
	if b, _ := os.ReadFile(filepath.Join(out, "contents", "sub", "run.sh")); string(b) != "alpha" {
		t.Fatalf("file onto a file: %q", b)
	}
	_, err = copyLocal(t, filepath.Join(src, "abs"), filepath.Join(out, "link"))
	must(err)
	if l, err := os.Readlink(filepath.Join(out, "link")); err != nil || l != "/etc/hostname" {
		t.Fatalf("a symbolic link copied as %q, %v", l, err)
	}
	if _, err := copyLocal(t, src, filepath.Join(out, "link")); !errors.Is(err, tarcopy.ErrDirOnFile) {
		t.Fatalf("a directory onto a file (a link to one): %v", err)
	}
	if _, err := copyLocal(t, filepath.Join(src, "nope"), out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing source: %v", err)
	}
	if _, err := copyLocal(t, filepath.Join(src, "a.txt")+"/", out); !errors.Is(err, tarcopy.ErrNotDir) {
		t.Fatalf("a file named with a trailing /: %v", err)
	}
}

// Write's stream: root's owner, no names, mtimes to the second, a
// directory's entries after it, a socket skipped.
func TestWriteHeaders(t *testing.T) {
	src := tree(t)
	sock, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	l, err := tarcopy.Resolve(src, false)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var skipped []string
	st, err := tarcopy.Write(&buf, l, tarcopy.WriteOptions{Skipped: func(n, why string) { skipped = append(skipped, filepath.Base(n)+": "+why) }})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.Nanosecond() != 0 {
			t.Errorf("%s: uid %d gid %d %q %q mtime %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if h.Name == "src/sub/hard" && (h.Typeflag != tar.TypeLink || h.Linkname != "src/a.txt") {
			t.Errorf("the second link of a file: %c -> %q", h.Typeflag, h.Linkname)
		}
	}
	if names[0] != "src/" || int64(len(names)) != st.Entries {
		t.Fatalf("entries %q (stats %d)", names, st.Entries)
	}
	if len(skipped) != 1 || skipped[0] != "sock: a socket cannot be copied" {
		t.Fatalf("skipped %q, want the socket", skipped)
	}
}
