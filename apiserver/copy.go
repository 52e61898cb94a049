package apiserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/tarcopy"
)

// Copies: files into and out of a sandbox's filesystem (shoal sandbox
// cp), by its owner (other nodes relay the call, forward.go), on a running
// or a stopped container: the engine's archive API needs no process. Each
// copy counts against --max-execs, as an exec does. Where a copy lands is
// docker cp's rule (tarcopy.Place), decided here on the owner, from what
// the destination is there: the client sends its source as a tar stream
// with one top-level entry and the owner renames that entry on the way
// (tarcopy.Rebase), refusing entries outside it and device files. The
// stream is never held whole: it goes through in chunks, and gRPC's flow
// control holds the sender back while the engine writes.

// copyChunk is the most tar data one message carries, either way (well
// under shoal.MaxRequestBytes): a gigabyte is a thousand messages.
const copyChunk = 1 << 20

// maxLinkHops bounds the symbolic links followed for a copy's -L.
const maxLinkHops = 16

func (s *Server) CopyToSandbox(stream shoalv1.Shoal_CopyToSandboxServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return shoal.Invalid("start", "the call ended before its first message, which starts the copy")
	}
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return shoal.Invalid("start", "is required in the first message, and only there")
	}
	if err := validateCopyStart(start); err != nil {
		return err
	}
	ctx := stream.Context()
	id, remote, release, err := s.streamSlot(ctx, start.Workspace, start.Name, false)
	if err != nil {
		return err
	}
	defer release()
	if remote != nil {
		return s.forwardCopyTo(remote, first, stream)
	}

	src := tarcopy.Source{Name: start.SourceName, Dir: start.SourceDir}
	dst, err := s.copyDest(ctx, id, start.Path)
	if err != nil {
		return inSandbox(start.Name, err)
	}
	place, err := tarcopy.Place(src, dst)
	if err != nil {
		return inSandbox(start.Name, placeErr(start.Path, dst, err))
	}
	from := src.Name
	if src.Stream() {
		from = "."
	}
	// The engine reads the stream in a goroutine of this call while this
	// one receives it. Whichever stops first ends the other: the engine
	// that fails, by closing its end of the pipe (the next write fails);
	// a stream that breaks or holds a refused entry, by closing the other
	// end with the error, so that the engine never takes it for the
	// stream's end. An engine that succeeds has read the archive's end:
	// what may follow (the rest of that end) is drained.
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		// Read a chunk at a time (the engine's client would read 32 KiB),
		// and only read: the engine's client must not close the pipe.
		err := s.cfg.Runtime.CopyTo(ctx, id, place.Dir, bufio.NewReaderSize(pr, copyChunk))
		if err == nil {
			_, _ = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(errEngineDone)
		copied <- err
	}()
	in := &copyInput{stream: stream}
	defer in.close()
	st, rerr := tarcopy.Rebase(pw, in, from, place.Rename, tarcopy.RefuseDevices)
	pw.CloseWithError(rerr) // nil: the stream's end
	cerr := <-copied
	if rerr != nil && !errors.Is(rerr, errEngineDone) {
		return copyInputErr(rerr)
	}
	if cerr != nil {
		return inSandbox(start.Name, cerr)
	}
	return stream.SendAndClose(&shoalv1.CopyToSandboxResponse{Path: place.Landed(src), Entries: st.Entries, Bytes: st.Bytes})
}

// errEngineDone is what a write to the engine's end of a copy meets once
// the engine has returned.
var errEngineDone = errors.New("the engine ended the copy")

func validateCopyStart(start *shoalv1.CopyToSandboxStart) error {
	if err := validateRef(start.Workspace, start.Name); err != nil {
		return err
	}
	if err := validCopyPath("start.path", start.Path); err != nil {
		return err
	}
	if n := start.SourceName; n != "" {
		if !tarcopy.ValidSourceName(n) {
			return shoal.Invalid("start.source_name", "%q is not one path element (or \".\" for a directory's contents)", trunc(n))
		}
		if n == "." && !start.SourceDir {
			return shoal.Invalid("start.source_dir", "must be set when source_name is \".\" (a directory's contents)")
		}
	} else if start.SourceDir {
		return shoal.Invalid("start.source_dir", "is set without source_name (a tar stream of its own has no top-level entry)")
	}
	return nil
}

// validCopyPath: an absolute path of at most 4096 bytes, text only.
func validCopyPath(field, p string) error {
	if p == "" || p[0] != '/' || len(p) > 4096 {
		return shoal.Invalid(field, "%q is not an absolute path (at most 4096 bytes)", trunc(p))
	}
	return validText(field, p, false)
}

// copyInput reads the tar stream of a CopyToSandbox call: the data of the
// messages after the first, until the half-close (io.EOF). A broken call
// is its error, never the stream's end. A message that is its data field
// alone (every one a client sends) is read where it arrived, in gRPC's
// buffers (relayCodec): it is not decoded into a copy first. Any other is
// decoded.
type copyInput struct {
	stream interface{ RecvMsg(any) error }
	data   *mem.Reader // the current message's data
	buf    []byte      // or, decoded, what is left of it
}

// dataTag is the tag of CopyToSandboxInput.data in its encoding.
var dataTag = byte(protowire.EncodeTag((&shoalv1.CopyToSandboxInput{}).ProtoReflect().Descriptor().Fields().ByName("data").Number(), protowire.BytesType))

func (c *copyInput) Read(p []byte) (int, error) {
	for {
		if c.data != nil && c.data.Remaining() > 0 {
			return c.data.Read(p)
		}
		if len(c.buf) > 0 {
			n := copy(p, c.buf)
			c.buf = c.buf[n:]
			return n, nil
		}
		c.close()
		var f rawFrame
		if err := c.stream.RecvMsg(&f); err != nil {
			return 0, err
		}
		err := c.take(f.data)
		f.free()
		if err != nil {
			return 0, err
		}
	}
}

// take makes a received message's data the next to read.
func (c *copyInput) take(msg mem.BufferSlice) error {
	r := msg.Reader()
	if tag, err := r.ReadByte(); err == nil && tag == dataTag {
		if n, err := binary.ReadUvarint(r); err == nil && n == uint64(r.Remaining()) {
			c.data = r
			return nil
		}
	}
	r.Close()
	var m shoalv1.CopyToSandboxInput
	if err := proto.Unmarshal(msg.Materialize(), &m); err != nil {
		return shoal.Invalid("input", "a message does not decode: %v", err)
	}
	switch in := m.Input.(type) {
	case *shoalv1.CopyToSandboxInput_Data:
		c.buf = in.Data
		return nil
	case *shoalv1.CopyToSandboxInput_Start:
		return shoal.Invalid("start", "is allowed in the first message only")
	}
	return shoal.Invalid("input", "a message carries neither start nor data")
}

// close releases the buffers of the message being read.
func (c *copyInput) close() {
	if c.data != nil {
		c.data.Close()
		c.data = nil
	}
}

// copyInputErr is the error of a copy's stream that could not be taken:
// a refused entry, a stream cut short or not tar, a bad message; a call
// that broke is its own error.
func copyInputErr(err error) error {
	var ee *tarcopy.EntryError
	switch {
	case errors.As(err, &ee):
		return shoal.Invalid("data", "%v; nothing after it was written", ee)
	case errors.Is(err, tarcopy.ErrTruncated), errors.Is(err, tarcopy.ErrNotTar):
		return shoal.Invalid("data", "%v", err)
	}
	return err
}

// copyDest finds what a copy's destination is, as docker cp does: a
// symbolic link there is followed (once), and what it points to need not
// exist; something that is neither a directory nor a regular file is
// refused.
func (s *Server) copyDest(ctx context.Context, id, p string) (tarcopy.Dest, error) {
	d := tarcopy.Dest{Path: p}
	st, err := s.cfg.Runtime.StatPath(ctx, id, p)
	if shoal.KindOf(err) == shoal.KindNotFound {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if st.Mode&fs.ModeSymlink != 0 {
		d.Path = linkTarget(p, st.LinkTarget)
		st, err = s.cfg.Runtime.StatPath(ctx, id, d.Path)
		if shoal.KindOf(err) == shoal.KindNotFound {
			return d, nil
		}
		if err != nil {
			return d, err
		}
	}
	if !st.Mode.IsDir() && !st.Mode.IsRegular() {
		return d, shoal.FailedPrecondition("%s is a %s: a copy's destination is a directory or a regular file", d.Path, fileType(st.Mode))
	}
	d.Exists, d.Dir = true, st.Mode.IsDir()
	return d, nil
}

// linkTarget is the path a symbolic link at p points to.
func linkTarget(p, target string) string {
	if path.IsAbs(target) {
		return target
	}
	return path.Join(path.Dir(path.Clean(p)), target)
}

// placeErr names why docker cp's rules refuse a destination.
func placeErr(p string, dst tarcopy.Dest, err error) error {
	switch {
	case errors.Is(err, tarcopy.ErrNoDir):
		return shoal.NotFound("no such directory: %s", dst.Path)
	case errors.Is(err, tarcopy.ErrNotDir):
		return shoal.FailedPrecondition("not a directory: %s (a tar stream is extracted into a directory)", dst.Path)
	case errors.Is(err, tarcopy.ErrDirOnFile):
		return shoal.FailedPrecondition("cannot copy a directory onto the file %s", dst.Path)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// inSandbox puts the sandbox's name in front of a copy's error, keeping
// its kind.
func inSandbox(name string, err error) error {
	var e *shoal.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("sandbox %q: %w", name, err)
	}
	c := *e
	c.Msg = fmt.Sprintf("sandbox %q: %s", name, e.Msg)
	return &c
}

// forwardCopyTo relays a CopyToSandbox call to the sandbox's owner:
// message by message, the first included, then the owner's answer. A
// broken input stream ends the owner's call with its cause: it must not
// read as the stream's end.
func (s *Server) forwardCopyTo(remote *ownerCall, first *shoalv1.CopyToSandboxInput, stream shoalv1.Shoal_CopyToSandboxServer) error {
	fctx, fcancel := context.WithCancelCause(remote.ctx)
	defer fcancel(nil)
	fwd, err := remote.client.CopyToSandbox(fctx)
	if err != nil {
		return err
	}
	// The data goes on as it came, never decoded here (relayCodec).
	for m := any(first); ; {
		if fwd.SendMsg(m) != nil {
			if f, ok := m.(*rawFrame); ok {
				f.free()
			}
			break // the owner ended the call: CloseAndRecv says why
		}
		f := &rawFrame{}
		if err := stream.RecvMsg(f); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			fcancel(err)
			return err
		}
		m = f
	}
	resp, err := fwd.CloseAndRecv()
	if err != nil {
		return remote.failed(s.cfg.Node, "copy", err, fwd.Trailer())
	}
	return stream.SendAndClose(resp)
}

func (s *Server) CopyFromSandbox(req *shoalv1.CopyFromSandboxRequest, stream shoalv1.Shoal_CopyFromSandboxServer) error {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return err
	}
	if err := validCopyPath("path", req.Path); err != nil {
		return err
	}
	ctx := stream.Context()
	id, remote, release, err := s.streamSlot(ctx, req.Workspace, req.Name, false)
	if err != nil {
		return err
	}
	defer release()
	if remote != nil {
		fwd, err := remote.client.CopyFromSandbox(remote.ctx, req)
		if err != nil {
			return err
		}
		return relayRaw(remote, s.cfg.Node, "copy", fwd, stream.SendMsg)
	}
	p, rename := req.Path, ""
	if req.FollowLink {
		if p, err = s.followLinks(ctx, id, req.Path); err != nil {
			return inSandbox(req.Name, err)
		}
		if p != req.Path {
			rename = path.Base(path.Clean(req.Path))
		}
	}
	rc, st, err := s.cfg.Runtime.CopyFrom(ctx, id, p)
	if err != nil {
		return inSandbox(req.Name, err)
	}
	defer rc.Close()
	stat := pathStat(st)
	if rename != "" {
		stat.Name = rename
	}
	if err := stream.Send(&shoalv1.CopyChunk{Stat: stat}); err != nil {
		return err
	}
	w := &copyWriter{send: stream.SendMsg}
	if rename != "" && rename != st.Name {
		_, err = tarcopy.Rebase(w, rc, st.Name, rename, nil)
	} else {
		_, err = io.Copy(w, rc)
	}
	if err != nil {
		return inSandbox(req.Name, err)
	}
	return w.flush()
}

// followLinks resolves the symbolic links at the end of p (docker cp -L).
func (s *Server) followLinks(ctx context.Context, id, p string) (string, error) {
	for range maxLinkHops {
		st, err := s.cfg.Runtime.StatPath(ctx, id, p)
		if err != nil {
			return "", err
		}
		if st.Mode&fs.ModeSymlink == 0 {
			return p, nil
		}
		p = linkTarget(p, st.LinkTarget)
	}
	return "", shoal.FailedPrecondition("%s: more than %d symbolic links in a row", p, maxLinkHops)
}

func pathStat(st shoal.PathStat) *shoalv1.PathStat {
	m := st.Mode
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	t := shoalv1.FileType_FILE_TYPE_OTHER
	switch {
	case m.IsRegular():
		t = shoalv1.FileType_FILE_TYPE_REGULAR
	case m.IsDir():
		t = shoalv1.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		t = shoalv1.FileType_FILE_TYPE_SYMLINK
	}
	out := &shoalv1.PathStat{Name: st.Name, Type: t, Mode: mode, Size: st.Size, LinkTarget: st.LinkTarget}
	if !st.ModTime.IsZero() {
		out.Mtime = timestamppb.New(st.ModTime)
	}
	return out
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// copyWriter sends what is written to it as CopyChunks of copyChunk
// bytes of data (the last one shorter, at flush), each encoded here: the
// chunk is its data field alone, written in front of the data in the one
// buffer it was gathered in, and sent as it is (a rawFrame, relayCodec).
// A message may still be read once sent (stats handlers): each has a
// buffer of its own.
type copyWriter struct {
	send func(any) error
	buf  []byte // chunkHead bytes kept for the field's tag and length, then the data
}

// chunkHead is the most a chunk's tag and length take: a tag of one byte
// and a length below 1<<21, three.
const chunkHead = 4

// chunkData is the field number of CopyChunk.data.
var chunkData = (&shoalv1.CopyChunk{}).ProtoReflect().Descriptor().Fields().ByName("data").Number()

func (w *copyWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, chunkHead, chunkHead+copyChunk)
		}
		k := min(len(p), chunkHead+copyChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == chunkHead+copyChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *copyWriter) flush() error {
	if len(w.buf) <= chunkHead {
		return nil
	}
	head := protowire.AppendVarint(protowire.AppendTag(nil, chunkData, protowire.BytesType), uint64(len(w.buf)-chunkHead))
	start := chunkHead - len(head)
	copy(w.buf[start:], head)
	f := &rawFrame{data: mem.BufferSlice{mem.SliceBuffer(w.buf[start:])}}
	w.buf = nil
	return w.send(f)
}
