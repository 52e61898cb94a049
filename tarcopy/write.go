package tarcopy

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Local is a local source of a copy: what is at Path, under its top-level
// name in the stream.
type Local struct {
	// Path is what is read: the path given, with symbolic links resolved
	// as docker cp resolves them.
	Path string
	Source
}

// Resolve finds what a local source path names, as docker cp does: a
// symbolic link at its end is copied as a link, unless follow (-L) or the
// path ends in / or /. (which name a directory); SRC/. and . name a
// directory's contents. A missing path is an error that errors.Is
// fs.ErrNotExist.
func Resolve(p string, follow bool) (Local, error) {
	if p == "" {
		return Local{}, fmt.Errorf("an empty source path")
	}
	slashed := filepath.ToSlash(p)
	contents := slashed == "." || strings.HasSuffix(slashed, "/.")
	asDir := contents || strings.HasSuffix(slashed, "/")
	clean := filepath.Clean(p)
	if clean == string(filepath.Separator) {
		contents, asDir = true, true
	}
	var real string
	if asDir || follow {
		r, err := filepath.EvalSymlinks(clean)
		if err != nil {
			return Local{}, err
		}
		real = r
	} else {
		// The directory part is resolved (it is only the way there);
		// the last element is copied as it is, a link included.
		d, err := filepath.EvalSymlinks(filepath.Dir(clean))
		if err != nil {
			return Local{}, err
		}
		real = filepath.Join(d, filepath.Base(clean))
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return Local{}, err
	}
	if asDir && !fi.IsDir() {
		return Local{}, &fs.PathError{Op: "copy", Path: p, Err: ErrNotDir}
	}
	name := filepath.Base(clean)
	switch {
	case contents:
		name = "."
	case name == "." || name == "..":
		name = filepath.Base(real)
	}
	return Local{Path: real, Source: Source{Name: name, Dir: fi.IsDir()}}, nil
}

// Size is the total size of the regular files of l (what Write's Read
// hook counts).
func (l Local) Size() (int64, error) {
	var n int64
	err := filepath.WalkDir(l.Path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// Stats count what a copy carried.
type Stats struct {
	Entries int64
	// Bytes of regular files.
	Bytes int64
}

// WriteOptions are Write's hooks; both may be nil.
type WriteOptions struct {
	// Skipped is told of each entry left out, and why (sockets and device
	// files cannot be copied).
	Skipped func(name, why string)
	// Read is told of the bytes of regular files as they are read.
	Read func(n int)
}

// Write writes l to w as a tar stream: the file, link or directory tree,
// entries named under l.Name, directories before what they hold. Symbolic
// links inside are copied as links; modes and mtimes (to the second) are
// kept; owners are root (uid and gid 0, no names: docker cp's files land
// owned by root); a file with several links is stored once and linked.
// A file that changes size while it is read ends the copy with an error.
func Write(w io.Writer, l Local, opts WriteOptions) (Stats, error) {
	tw := tar.NewWriter(w)
	var st Stats
	links := map[fileID]string{}
	buf := make([]byte, copyBuffer)
	err := filepath.WalkDir(l.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(l.Path, p)
		if err != nil {
			return err
		}
		name := path.Join(l.Name, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime().Truncate(time.Second)}
		var src *os.File
		switch m := fi.Mode(); {
		case m.IsDir():
			hdr.Typeflag = tar.TypeDir
			if name != "." {
				hdr.Name += "/"
			}
		case m.IsRegular():
			if id, ok := linkID(fi); ok {
				if first, seen := links[id]; seen {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					break
				}
				links[id] = name
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			if src, err = os.Open(p); err != nil {
				return err
			}
			defer src.Close()
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case m&fs.ModeNamedPipe != 0:
			hdr.Typeflag = tar.TypeFifo
		default:
			if opts.Skipped != nil {
				opts.Skipped(p, "a "+kind(m)+" cannot be copied")
			}
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		st.Entries++
		if src == nil {
			return nil
		}
		var r io.Reader = src
		if opts.Read != nil {
			r = &countReader{r: src, f: opts.Read}
		}
		n, err := io.CopyBuffer(onlyWriter{tw}, io.LimitReader(r, hdr.Size), buf)
		st.Bytes += n
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n < hdr.Size {
			return fmt.Errorf("%s: the file shrank while it was copied (%d of %d bytes)", p, n, hdr.Size)
		}
		return src.Close()
	})
	if err != nil {
		return st, err
	}
	return st, tw.Close()
}

// tarMode is the permission bits of m as a tar header's mode.
func tarMode(m fs.FileMode) int64 {
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "file of an unknown type"
}

type countReader struct {
	r io.Reader
	f func(int)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.f(n)
	}
	return n, err
}
