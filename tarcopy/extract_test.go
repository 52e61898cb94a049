package tarcopy_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"shoal/tarcopy"
)

// entry is one entry of a test tar.
type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	mtime      time.Time
}

func mkTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, ModTime: e.mtime, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// listing is every path under dir (relative, "/" separated) with what it
// is: "d", "f:content", "l:target".
func listing(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "l:" + l
		case d.IsDir():
			out[rel] = "d"
		case d.Type().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = "f:" + string(b)
		default: // a named pipe would block a read
			out[rel] = "other:" + d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// world is a temporary tree that a copy must not touch outside its
// destination: a sibling directory and a file next to the destination.
type world struct {
	top, dst string
	before   map[string]string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	top := t.TempDir()
	w := &world{top: top, dst: filepath.Join(top, "dst")}
	for _, d := range []string{"dst", "sibling", "etc"} {
		if err := os.Mkdir(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "etc", "passwd"), []byte("root:x:0:0"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.before = listing(t, top)
	return w
}

// outside is what changed outside the destination.
func (w *world) outside(t testing.TB) []string {
	t.Helper()
	var changed []string
	after := listing(t, w.top)
	for p, v := range after {
		if p == "dst" || strings.HasPrefix(p, "dst/") {
			continue
		}
		if w.before[p] != v {
			changed = append(changed, p+" = "+v)
		}
	}
	for p := range w.before {
		if _, ok := after[p]; !ok {
			changed = append(changed, p+" removed")
		}
	}
	slices.Sort(changed)
	return changed
}

// Hostile streams from a sandbox: nothing lands outside the destination,
// whether the copy extracts into the destination itself or, for a
// destination that does not exist yet, into its parent under a new name;
// each unsafe entry is skipped and reported, and the safe ones are
// written.
func TestExtractHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		unsafe  int
		want    map[string]string // under the destination
	}{
		{"dot-dot", []entry{{name: "x/../../etc/passwd", body: "pwned"}, {name: "../../etc/passwd", body: "pwned"}, {name: "x/ok", body: "ok"}},
			2, map[string]string{"x": "d", "x/ok": "f:ok"}},
		{"absolute names", []entry{{name: "/etc/passwd", body: "pwned"}, {name: "/x", typ: tar.TypeDir}, {name: "x/ok", body: "ok"}},
			2, map[string]string{"x": "d", "x/ok": "f:ok"}},
		{"symlink out, then a file through it", []entry{
			{name: "x/", typ: tar.TypeDir, mode: 0o755},
			{name: "x/evil", typ: tar.TypeSymlink, link: "/etc"},
			{name: "x/evil/passwd", body: "pwned"},
			{name: "x/up", typ: tar.TypeSymlink, link: "../../etc"},
			{name: "x/up/passwd", body: "pwned"},
			{name: "x/side", typ: tar.TypeSymlink, link: "../sibling"},
			{name: "x/side/planted", body: "pwned"},
			{name: "x/side/deeper/planted", body: "pwned"},
		}, 4, map[string]string{"x": "d", "x/evil": "l:/etc", "x/up": "l:../../etc", "x/side": "l:../sibling"}},
		{"a symlink replaces a directory on the way", []entry{
			{name: "x/d/", typ: tar.TypeDir},
			{name: "x/d", typ: tar.TypeSymlink, link: "/etc"},
			{name: "x/d/passwd", body: "pwned"},
		}, 0, nil}, // refused: a directory is never replaced (error below)
		{"symlink over an existing file, written through", []entry{
			{name: "x/f", body: "first"},
			{name: "x/f", typ: tar.TypeSymlink, link: "/etc/passwd"},
			{name: "x/f", body: "pwned"},
		}, 0, map[string]string{"x": "d", "x/f": "f:pwned"}},
		{"hard links out", []entry{
			{name: "x/ok", body: "ok"},
			{name: "x/h1", typ: tar.TypeLink, link: "/etc/passwd"},
			{name: "x/h2", typ: tar.TypeLink, link: "../etc/passwd"},
			{name: "x/h3", typ: tar.TypeLink, link: "x/../../etc/passwd"},
			{name: "x/l", typ: tar.TypeSymlink, link: "/etc/passwd"},
			{name: "x/h4", typ: tar.TypeLink, link: "x/l"},
			{name: "x/h5", typ: tar.TypeLink, link: "x/ok"},
		}, 4, map[string]string{"x": "d", "x/ok": "f:ok", "x/l": "l:/etc/passwd", "x/h5": "f:ok"}},
		{"entries beside the top-level one", []entry{{name: "x/ok", body: "ok"}, {name: "other", body: "pwned"}, {name: "xx/y", body: "pwned"}, {name: ".", typ: tar.TypeDir}},
			3, map[string]string{"x": "d", "x/ok": "f:ok"}},
		{"device files", []entry{{name: "x/ok", body: "ok"}, {name: "x/sda", typ: tar.TypeBlock}, {name: "x/mem", typ: tar.TypeChar}},
			0, map[string]string{"x": "d", "x/ok": "f:ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := mkTar(t, tc.entries...)
			// Into the destination as it is, and as a new name in its
			// parent (the destination did not exist).
			for _, into := range []string{"dst", "parent"} {
				w := newWorld(t)
				dir, to := w.dst, ""
				if into == "parent" {
					dir, to = w.top, "dst"
					os.Remove(w.dst)
				}
				var skipped []string
				st, err := tarcopy.Extract(bytes.NewReader(stream), dir, "x", to, tarcopy.ExtractOptions{Skipped: func(n, why string) { skipped = append(skipped, n+": "+why) }})
				if changed := w.outside(t); len(changed) > 0 {
					t.Fatalf("into %s: written outside the destination: %q", into, changed)
				}
				if tc.want == nil {
					if err == nil {
						t.Fatalf("into %s: no error", into)
					}
					continue
				}
				if err != nil {
					t.Fatalf("into %s: %v", into, err)
				}
				if st.Unsafe != tc.unsafe {
					t.Errorf("into %s: %d unsafe entries, want %d: %q", into, st.Unsafe, tc.unsafe, skipped)
				}
				got := listing(t, w.dst)
				want := map[string]string{".": "d"}
				for k, v := range tc.want {
					if into == "parent" {
						k = strings.TrimPrefix(strings.TrimPrefix(k, "x"), "/")
						if k == "" {
							k = "."
						}
					}
					want[k] = v
				}
				if into == "dst" {
					delete(want, "x")
					want["x"] = "d"
				}
				if !equalMaps(got, want) {
					t.Errorf("into %s: the destination holds %v, want %v (skipped %q)", into, got, want, skipped)
				}
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Modes and mtimes as the stream has them, directories' too (set after
// their contents); setuid and setgid dropped; a dangling symbolic link
// made as it is; a directory and a file never replace each other.
func TestExtractKeepsModesAndMtimes(t *testing.T) {
	t0 := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	stream := mkTar(t,
		entry{name: "x/", typ: tar.TypeDir, mode: 0o750, mtime: t0},
		entry{name: "x/ro/", typ: tar.TypeDir, mode: 0o555, mtime: t0.Add(time.Hour)},
		entry{name: "x/ro/f", body: "data", mode: 0o440, mtime: t0.Add(2 * time.Hour)},
		entry{name: "x/suid", body: "#!", mode: 0o6755, mtime: t0},
		entry{name: "x/dangling", typ: tar.TypeSymlink, link: "../nowhere", mtime: t0.Add(3 * time.Hour)},
	)
	dst := t.TempDir()
	if _, err := tarcopy.Extract(bytes.NewReader(stream), dst, "x", "", tarcopy.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}{
		{"x", fs.ModeDir | 0o750, t0},
		{"x/ro", fs.ModeDir | 0o555, t0.Add(time.Hour)},
		{"x/ro/f", 0o440, t0.Add(2 * time.Hour)},
		{"x/suid", 0o755, t0},
		{"x/dangling", fs.ModeSymlink | 0o777, t0.Add(3 * time.Hour)},
	} {
		fi, err := os.Lstat(filepath.Join(dst, c.name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode || !fi.ModTime().Equal(c.mtime) {
			t.Errorf("%s: %v %v, want %v %v", c.name, fi.Mode(), fi.ModTime().UTC(), c.mode, c.mtime)
		}
	}
	os.Chmod(filepath.Join(dst, "x", "ro"), 0o755)

	// A directory where a file is, and a file where a directory is.
	for _, e := range []entry{{name: "x/ro/f/", typ: tar.TypeDir}, {name: "x/ro", body: "a file"}} {
		_, err := tarcopy.Extract(bytes.NewReader(mkTar(t, e)), dst, "x", "", tarcopy.ExtractOptions{})
		if err == nil || !strings.Contains(err.Error(), "cannot overwrite") {
			t.Errorf("%s over what is there: %v, want a refusal", e.name, err)
		}
	}
	// A stream cut short is an error, not a shorter copy.
	whole := mkTar(t, entry{name: "x/big", body: strings.Repeat("y", 4096)})
	if _, err := tarcopy.Extract(bytes.NewReader(whole[:1024]), dst, "x", "", tarcopy.ExtractOptions{}); !errors.Is(err, tarcopy.ErrTruncated) {
		t.Errorf("a truncated stream: %v, want ErrTruncated", err)
	}
}
