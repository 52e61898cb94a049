package tarcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// ExtractOptions are Extract's hooks; both may be nil.
type ExtractOptions struct {
	// Skipped is told of each entry that was not written, and why.
	Skipped func(name, why string)
	// Wrote is told of the bytes of regular files as they are written.
	Wrote func(n int)
}

// ExtractStats count what Extract wrote and what it skipped.
type ExtractStats struct {
	Stats
	// Unsafe entries would have landed outside the destination (or
	// through a symbolic link); Unsupported ones are device files and
	// types a copy does not make.
	Unsafe, Unsupported int
}

// Extract writes the tar stream r under the existing directory dir, with
// its top-level entry from renamed to to (see Rebase; a Placement gives
// dir and to). Nothing is written outside dir, whatever the stream holds:
// every write goes through an os.Root of dir, and no symbolic link is
// followed on the way to an entry (every directory on its path must be a
// real directory, made by the stream or there before). Entries outside
// from, with absolute names or climbing out, through a symbolic link, or
// hard links to anything but a regular file of the copy are skipped as
// unsafe; device files, and types a copy does not make, as unsupported:
// each goes to opts.Skipped. Setuid and setgid bits are dropped (the files
// come from a sandbox, and belong to whoever runs the copy). Modes and
// mtimes are set as the stream has them, directories' once everything in
// them is written; dir's own (a "." entry) is left as it is. A directory
// and a non-directory never replace each other (docker cp's rule): that
// ends the copy with an error, as do a stream cut short and a write that
// fails. Whatever was written before an error stays.
func Extract(r io.Reader, dir, from, to string, opts ExtractOptions) (ExtractStats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return ExtractStats{}, err
	}
	defer root.Close()
	x := &extractor{root: root, opts: opts, dirs: map[string]bool{".": true}}
	tr := tar.NewReader(r)
	for {
		hdr, err := next(tr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.st, streamErr(err)
		}
		if err := x.entry(tr, hdr, from, to); err != nil {
			return x.st, err
		}
	}
	return x.st, x.finish()
}

type extractor struct {
	root *os.Root
	opts ExtractOptions
	st   ExtractStats
	// dirs are the directories known to be real ones (made here, or
	// checked with Lstat): the way to an entry only goes through these.
	dirs map[string]bool
	// meta is every directory's mode and mtime, set at the end.
	meta []dirMeta
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *extractor) skip(name, why string, unsafe bool) {
	if unsafe {
		x.st.Unsafe++
	} else {
		x.st.Unsupported++
	}
	if x.opts.Skipped != nil {
		x.opts.Skipped(name, why)
	}
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header, from, to string) error {
	if hdr.Typeflag == tar.TypeGNUSparse || hdr.PAXRecords["GNU.sparse.map"] != "" || hdr.PAXRecords["GNU.sparse.major"] != "" {
		// Neither the engine nor Write makes one; its holes would be
		// written out as zeros, any number of them, for nothing sent.
		x.skip(hdr.Name, "a sparse file, which copies do not carry", false)
		return nil
	}
	regular(hdr)
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock:
		x.skip(hdr.Name, "a device file: copies never make one", false)
		return nil
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		x.skip(hdr.Name, fmt.Sprintf("an entry of type %q, which a copy does not make", hdr.Typeflag), false)
		return nil
	}
	name, why := rename(hdr.Name, from, to)
	if why != "" {
		x.skip(hdr.Name, why, true)
		return nil
	}
	if name == "." {
		// The destination itself: it exists, and keeps its own mode.
		return nil
	}
	if why := x.way(path.Dir(name)); why != "" {
		x.skip(hdr.Name, why, true)
		return nil
	}
	fi, err := x.root.Lstat(name)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if exists && fi.IsDir() != (hdr.Typeflag == tar.TypeDir) {
		if fi.IsDir() {
			return fmt.Errorf("cannot overwrite directory %q with non-directory %q", path.Join(x.root.Name(), name), hdr.Name)
		}
		return fmt.Errorf("cannot overwrite non-directory %q with directory %q", path.Join(x.root.Name(), name), hdr.Name)
	}
	if exists && !fi.IsDir() {
		if err := x.root.Remove(name); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists {
			// Writable by its maker until the end, whatever its mode.
			if err := x.root.Mkdir(name, 0o700); err != nil {
				return err
			}
		}
		x.dirs[name] = true
		x.meta = append(x.meta, dirMeta{name: name, mode: mode, mtime: hdr.ModTime})
	case tar.TypeReg:
		if err := x.file(tr, name, hdr, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		// Made, never followed: its target may point anywhere.
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if err := lchtimes(x.root, name, hdr.ModTime); err != nil {
			return err
		}
	case tar.TypeLink:
		target, why := rename(hdr.Linkname, from, to)
		if why == "" {
			why = x.linkable(target)
		}
		if why != "" {
			x.skip(hdr.Name, fmt.Sprintf("a hard link to %q: %s", hdr.Linkname, why), true)
			return nil
		}
		if err := x.root.Link(target, name); err != nil {
			return err
		}
	case tar.TypeFifo:
		if err := mkfifo(x.root, name, uint32(mode.Perm())); err != nil {
			return err
		}
		if err := x.root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
			return err
		}
	}
	x.st.Entries++
	return nil
}

// file writes a regular file: made anew (never through what was there),
// then its mode and mtime.
func (x *extractor) file(tr *tar.Reader, name string, hdr *tar.Header, mode fs.FileMode) error {
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	var w io.Writer = f
	if x.opts.Wrote != nil {
		w = &countWriter{w: f, f: x.opts.Wrote}
	}
	n, err := io.Copy(w, tr)
	x.st.Bytes += n
	if err != nil {
		f.Close()
		return streamErr(err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return x.root.Chtimes(name, hdr.ModTime, hdr.ModTime)
}

// way makes sure every element of dir is a real directory under the root,
// making the missing ones (0755, as docker cp does), and says why not.
func (x *extractor) way(dir string) string {
	if x.dirs[dir] {
		return ""
	}
	if why := x.way(path.Dir(dir)); why != "" {
		return why
	}
	fi, err := x.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := x.root.Mkdir(dir, 0o755); err != nil {
			return "its directory cannot be made: " + err.Error()
		}
	case err != nil:
		return err.Error()
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Sprintf("its path goes through the symbolic link %q", dir)
	case !fi.IsDir():
		return fmt.Sprintf("its path goes through %q, which is not a directory", dir)
	}
	x.dirs[dir] = true
	return ""
}

// linkable says why target may not be hard-linked to: it must be a regular
// file reached through real directories.
func (x *extractor) linkable(target string) string {
	if target == "." {
		return "the destination itself"
	}
	if why := x.way(path.Dir(target)); why != "" {
		return why
	}
	fi, err := x.root.Lstat(target)
	if err != nil {
		return "nothing of the copy is there"
	}
	if !fi.Mode().IsRegular() {
		return "not a regular file"
	}
	return ""
}

// finish sets the directories' modes and mtimes, deepest first: a
// directory's mtime changes with every entry made in it.
func (x *extractor) finish() error {
	slices.SortStableFunc(x.meta, func(a, b dirMeta) int {
		return strings.Count(b.name, "/") - strings.Count(a.name, "/")
	})
	for _, m := range x.meta {
		if err := x.root.Chmod(m.name, m.mode); err != nil {
			return err
		}
		if err := x.root.Chtimes(m.name, m.mtime, m.mtime); err != nil {
			return err
		}
	}
	return nil
}

type countWriter struct {
	w io.Writer
	f func(int)
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if n > 0 {
		c.f(n)
	}
	return n, err
}
