package tarcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Rebase copies the tar stream r to w, entry by entry, with the top-level
// entry from renamed to to ("" keeps it; from "." with to "" takes every
// entry as it is). It refuses, with an *EntryError that ends the copy, an
// entry outside from, an absolute name or one climbing out with "..", a
// hard link to outside from, and whatever check refuses (check may be
// nil). Everything else of an entry (mode, mtime, owner, link target,
// extended records) passes as it is. A stream that breaks or ends in the
// middle of an entry is an error too: it must not read as a whole copy.
func Rebase(w io.Writer, r io.Reader, from, to string, check func(*tar.Header) error) (Stats, error) {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	var st Stats
	buf := make([]byte, copyBuffer)
	for {
		hdr, err := next(tr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, streamErr(err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // its records were applied to the entries that follow
		}
		regular(hdr)
		name, why := rename(hdr.Name, from, to)
		if why != "" {
			return st, &EntryError{Name: hdr.Name, Why: why}
		}
		if hdr.Typeflag == tar.TypeLink {
			target, why := rename(hdr.Linkname, from, to)
			if why != "" {
				return st, &EntryError{Name: hdr.Name, Why: fmt.Sprintf("a hard link to %q: %s", hdr.Linkname, why)}
			}
			hdr.Linkname = target
		}
		if check != nil {
			if err := check(hdr); err != nil {
				return st, err
			}
		}
		if hdr.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") && name != "." {
			name += "/"
		}
		hdr.Name = name
		// The writer picks a format that holds the new name.
		hdr.Format = tar.FormatUnknown
		if err := tw.WriteHeader(hdr); err != nil {
			return st, err
		}
		st.Entries++
		n, err := io.CopyBuffer(onlyWriter{tw}, tr, buf)
		st.Bytes += n
		if err != nil {
			return st, streamErr(err)
		}
	}
	return st, tw.Close()
}

// copyBuffer is the most a copy of a file's data moves at a time: large
// writes downstream (a pipe, a socket) cost fewer hand-offs and system
// calls than io.Copy's 32 KiB.
const copyBuffer = 1 << 20

// onlyWriter hides a writer's ReadFrom, so that io.CopyBuffer uses the
// buffer it is given.
type onlyWriter struct{ io.Writer }

// next is tr.Next, with names judged here: GODEBUG=tarinsecurepath=0
// makes the reader refuse what this package skips or refuses by name.
func next(tr *tar.Reader) (*tar.Header, error) {
	hdr, err := tr.Next()
	if hdr != nil && errors.Is(err, tar.ErrInsecurePath) {
		return hdr, nil
	}
	return hdr, err
}

// regular gives a sparse file the flag a writer writes for a regular one
// (a reader expands its holes; the reader gives old writers' flag for a
// regular file, TypeRegA, as TypeReg already).
func regular(hdr *tar.Header) {
	if hdr.Typeflag == tar.TypeGNUSparse {
		hdr.Typeflag = tar.TypeReg
	}
}

// Why a tar stream cannot be read.
var (
	ErrTruncated = errors.New("the tar stream ends in the middle of an entry")
	ErrNotTar    = errors.New("not a tar stream, or a damaged one")
)

// streamErr names a broken read of a tar stream: a stream cut short, or
// one that is not tar at all. Other errors (the reader's own) are as they
// are.
func streamErr(err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ErrTruncated
	case errors.Is(err, tar.ErrHeader):
		return fmt.Errorf("%w: %v", ErrNotTar, err)
	}
	return err
}

// RefuseDevices is a Rebase check: a copy into a sandbox never makes a
// device file (the engine extracts as root, outside the sandbox's own
// capabilities, and a sandbox has no MKNOD).
func RefuseDevices(hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock {
		return &EntryError{Name: hdr.Name, Why: "a device file: copies never make one"}
	}
	return nil
}
