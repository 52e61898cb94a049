package tarcopy

import (
	"errors"
	"path"
	"strings"
)

// Source is what a copy's stream holds: one top-level entry, Name (a base
// name, or "." for a directory's contents), a directory or not. The zero
// Source is a tar stream of its own (`-`), extracted as it is.
type Source struct {
	Name string
	Dir  bool
}

// Stream reports whether s is a tar stream of its own.
func (s Source) Stream() bool { return s.Name == "" }

// Dest is a copy's destination as found before the copy: Path (slash
// separated) as given, or what a symbolic link there points to (docker cp
// follows one), whether something exists there and whether that is a
// directory.
type Dest struct {
	Path        string
	Exists, Dir bool
}

// Placement is where a copy's stream is extracted: into the existing
// directory Dir, its top-level entry renamed to Rename ("" keeps its name).
type Placement struct {
	Dir, Rename string
}

// Landed is the path the source has once extracted: Dir/Rename or
// Dir/Name (Dir itself for a stream or a directory's contents).
func (p Placement) Landed(src Source) string {
	n := p.Rename
	if n == "" {
		n = src.Name
	}
	if n == "" || n == "." {
		return p.Dir
	}
	return path.Join(p.Dir, n)
}

// Why Place refuses a copy.
var (
	// ErrNoDir: the destination names a directory (it ends in / or /.,
	// or a tar stream is copied to it) and nothing is there.
	ErrNoDir = errors.New("no such directory")
	// ErrNotDir: a tar stream is extracted into a directory, and the
	// destination is not one.
	ErrNotDir = errors.New("not a directory")
	// ErrDirOnFile: a directory cannot be copied onto an existing file.
	ErrDirOnFile = errors.New("cannot copy a directory onto a file")
)

// Place is docker cp's table:
//
//	source        destination                 lands
//	file          missing                     a file of that name
//	file          missing, ends in /          ErrNoDir
//	file          a file                      replaces it
//	file          a directory                 in it, under its own name
//	directory     missing                     a directory of that name, with the source's contents
//	directory     a file                      ErrDirOnFile
//	directory     a directory                 in it, under its own name (SRC/.: its contents, in it)
//	tar stream    a directory                 extracted into it
//	tar stream    a file, or missing          ErrNotDir, ErrNoDir
func Place(src Source, dst Dest) (Placement, error) {
	dir, base := splitDirEntry(dst.Path)
	switch {
	case src.Stream():
		if !dst.Exists {
			return Placement{}, ErrNoDir
		}
		if !dst.Dir {
			return Placement{}, ErrNotDir
		}
		return Placement{Dir: dst.Path}, nil
	case dst.Exists && dst.Dir:
		return Placement{Dir: dst.Path}, nil
	case dst.Exists && src.Dir:
		return Placement{}, ErrDirOnFile
	case !dst.Exists && !src.Dir && assertsDir(dst.Path):
		return Placement{}, ErrNoDir
	}
	return Placement{Dir: dir, Rename: base}, nil
}

// splitDirEntry splits a slash path into its directory and its last
// element, keeping a final "." (docker's SplitPathDirEntry).
func splitDirEntry(p string) (dir, base string) {
	c := path.Clean(p)
	if p == "." || strings.HasSuffix(p, "/.") {
		c += "/."
	}
	return path.Dir(c), path.Base(c)
}

// assertsDir: a path that ends in / or /. names a directory.
func assertsDir(p string) bool {
	return strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || p == "."
}
