package apiserver_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// tarEntry is one entry of a test tar stream.
type tarEntry struct {
	name, link, body string
	typ              byte
	mode             int64
	mtime            time.Time
}

func tarOf(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, ModTime: e.mtime, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1600000000, 0)
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

// copyMsgs runs a CopyToSandbox call of the given messages and returns
// its answer.
func copyMsgs(ctx context.Context, c shoalv1.ShoalClient, msgs ...*shoalv1.CopyToSandboxInput) (*shoalv1.CopyToSandboxResponse, error) {
	st, err := c.CopyToSandbox(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if st.Send(m) != nil {
			break // the server ended the call: CloseAndRecv says why
		}
	}
	return st.CloseAndRecv()
}

func startMsg(s *shoalv1.CopyToSandboxStart) *shoalv1.CopyToSandboxInput {
	return &shoalv1.CopyToSandboxInput{Input: &shoalv1.CopyToSandboxInput_Start{Start: s}}
}

func dataMsg(b []byte) *shoalv1.CopyToSandboxInput {
	return &shoalv1.CopyToSandboxInput{Input: &shoalv1.CopyToSandboxInput_Data{Data: b}}
}

// copyIn sends stream after start, in chunks of 1000 bytes (entries cross
// messages).
func copyIn(ctx context.Context, c shoalv1.ShoalClient, start *shoalv1.CopyToSandboxStart, stream []byte) (*shoalv1.CopyToSandboxResponse, error) {
	msgs := []*shoalv1.CopyToSandboxInput{startMsg(start)}
	for len(stream) > 0 {
		n := min(len(stream), 1000)
		msgs = append(msgs, dataMsg(stream[:n]))
		stream = stream[n:]
	}
	return copyMsgs(ctx, c, msgs...)
}

// copyOut reads a CopyFromSandbox call whole: the stat, and the tar
// stream's entries as "name", "name=body", "name->link".
func copyOut(ctx context.Context, c shoalv1.ShoalClient, req *shoalv1.CopyFromSandboxRequest) (*shoalv1.PathStat, []string, error) {
	st, err := c.CopyFromSandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	first, err := st.Recv()
	if err != nil {
		return nil, nil, err
	}
	var data bytes.Buffer
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return first.Stat, nil, err
		}
		data.Write(ch.Data)
	}
	var out []string
	tr := tar.NewReader(&data)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			slices.Sort(out) // tar in a sandbox (a tmpfs) lists in its own order
			return first.Stat, out, nil
		}
		if err != nil {
			return first.Stat, out, err
		}
		b, _ := io.ReadAll(tr)
		e := h.Name
		switch {
		case h.Typeflag == tar.TypeSymlink:
			e += "->" + h.Linkname
		case len(b) > 0:
			e += "=" + string(b)
		}
		out = append(out, e)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, sub string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), sub) {
		t.Fatalf("%s: %v; want %s naming %q", what, err, code, sub)
	}
}

// sh runs a shell line in a sandbox and returns its stdout.
func sh(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name, line string) string {
	t.Helper()
	r, err := execAll(ctx, c, name, "sh", "-c", line)
	if err != nil || r.code != 0 {
		t.Fatalf("%s: %v, exit %d, stderr %q", line, err, r.code, r.stderr)
	}
	return string(r.stdout)
}

// Copies against a real node and engine: docker cp's rules for where a
// copy lands, modes and mtimes kept, symbolic links as links, -L; a
// stopped sandbox copied to and from; a read-only root refused naming the
// path, its tmpfs /tmp copied through the running container; a missing
// source NOT_FOUND naming it; bad input refused naming the field.
func TestCopyToAndFromSandbox(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	c := n.Client
	ctx := ctxT(t, 4*time.Minute)
	readySandbox(t, ctx, c, "cp")
	t0 := time.Date(2021, 6, 7, 8, 9, 10, 0, time.UTC)
	tree := tarOf(t,
		tarEntry{name: "src/", typ: tar.TypeDir, mode: 0o750, mtime: t0},
		tarEntry{name: "src/run.sh", body: "#!/bin/sh\necho hi\n", mode: 0o755, mtime: t0},
		tarEntry{name: "src/data", body: "payload", mode: 0o600, mtime: t0.Add(time.Hour)},
		tarEntry{name: "src/link", typ: tar.TypeSymlink, link: "/etc/hostname"},
	)
	file := tarOf(t, tarEntry{name: "f.txt", body: "one file", mode: 0o640, mtime: t0})

	// A file to a missing path: a file of that name, its mode and mtime.
	resp, err := copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/renamed.txt", SourceName: "f.txt"}, file)
	if err != nil || resp.Path != "/renamed.txt" || resp.Bytes != 8 || resp.Entries != 1 {
		t.Fatalf("a file to a missing path: %v %v", resp, err)
	}
	if got := sh(t, ctx, c, "cp", "cat /renamed.txt; stat -c ' %a %Y' /renamed.txt"); got != "one file 640 1623053350\n" {
		t.Fatalf("the copied file: %q", got)
	}
	// A directory to a missing path: made, with the contents; into an
	// existing directory: under its own name; its contents (SRC/.) into
	// one: merged.
	if resp, err = copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: "src", SourceDir: true}, tree); err != nil || resp.Path != "/work" {
		t.Fatalf("a directory to a missing path: %v %v", resp, err)
	}
	if resp, err = copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: "src", SourceDir: true}, tree); err != nil || resp.Path != "/work/src" {
		t.Fatalf("a directory into a directory: %v %v", resp, err)
	}
	contents := tarOf(t, tarEntry{name: ".", typ: tar.TypeDir, mode: 0o700}, tarEntry{name: "./more", body: "m"})
	if resp, err = copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: ".", SourceDir: true}, contents); err != nil || resp.Path != "/work" {
		t.Fatalf("a directory's contents into a directory: %v %v", resp, err)
	}
	// /work's own mtime moved when the later copies wrote in it.
	want := "/work 750\n/work/data 600 1623056950\n/work/link -> /etc/hostname\n/work/more 644 1600000000\n/work/run.sh 755 1623053350\n/work/src 750 1623053350\n"
	got := sh(t, ctx, c, "cp", `stat -c '/work %a' /work; for f in /work/*; do if [ -L $f ]; then echo "$f -> $(readlink $f)"; else echo "$f $(stat -c '%a %Y' $f)"; fi; done`)
	if got != want {
		t.Fatalf("the copied tree:\n%s\nwant:\n%s", got, want)
	}
	// A tar stream of its own, into a directory as it is.
	if resp, err = copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work"}, tarOf(t, tarEntry{name: "a/b/c", body: "deep"})); err != nil || resp.Path != "/work" {
		t.Fatalf("a tar stream into a directory: %v %v", resp, err)
	}
	if got := sh(t, ctx, c, "cp", "cat /work/a/b/c"); got != "deep" {
		t.Fatalf("a tar stream's file: %q", got)
	}

	// Refused destinations.
	for _, tc := range []struct {
		what  string
		start *shoalv1.CopyToSandboxStart
		data  []byte
		code  codes.Code
		sub   string
	}{
		{"a directory onto a file", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/renamed.txt", SourceName: "src", SourceDir: true}, tree, codes.FailedPrecondition, "cannot copy a directory onto the file /renamed.txt"},
		{"a stream onto a file", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/renamed.txt"}, file, codes.FailedPrecondition, "not a directory: /renamed.txt"},
		{"a file into a missing directory (ends in /)", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/nodir/", SourceName: "f.txt"}, file, codes.NotFound, "no such directory: /nodir/"},
		{"a file under a missing directory", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/nodir/x", SourceName: "f.txt"}, file, codes.NotFound, "/nodir"},
		{"a missing sandbox", &shoalv1.CopyToSandboxStart{Name: "nope", Path: "/x", SourceName: "f.txt"}, file, codes.NotFound, "nope"},
		{"onto a device", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/dev/null", SourceName: "f.txt"}, file, codes.FailedPrecondition, "/dev/null"},
		{"into the credential files' tmpfs", &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/run/shoal/x", SourceName: "f.txt"}, file, codes.FailedPrecondition, "/run/shoal"},
	} {
		_, err := copyIn(ctx, c, tc.start, tc.data)
		wantCode(t, tc.what, err, tc.code, tc.sub)
	}

	// Bad input: INVALID_ARGUMENT naming the field, or the entry.
	// Into a path of their own: a stream is written as it comes, so the
	// entries before a refused one are there.
	ok := &shoalv1.CopyToSandboxStart{Name: "cp", Path: "/scratch", SourceName: "src", SourceDir: true}
	for _, tc := range []struct {
		what string
		msgs []*shoalv1.CopyToSandboxInput
		sub  string
	}{
		{"no start first", []*shoalv1.CopyToSandboxInput{dataMsg(tree)}, "start"},
		{"nothing at all", nil, "start"},
		{"start twice", []*shoalv1.CopyToSandboxInput{startMsg(ok), startMsg(ok)}, "start"},
		{"an empty message", []*shoalv1.CopyToSandboxInput{startMsg(ok), {}}, "input"},
		{"a relative path", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "work"})}, "start.path"},
		{"a control character in the path", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "/a\nb"})}, "start.path"},
		{"a source name with a /", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: "a/b"})}, "start.source_name"},
		{"a source name of ..", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: ".."})}, "start.source_name"},
		{". that is no directory", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work", SourceName: "."})}, "start.source_dir"},
		{"a bad name", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "-x", Path: "/work"})}, "name"},
		{"an entry outside the source", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(tarOf(t, tarEntry{name: "src/a", body: "a"}, tarEntry{name: "other", body: "x"}))}, `"other"`},
		{"an entry climbing out", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(tarOf(t, tarEntry{name: "src/../../etc/passwd", body: "x"}))}, "climbs out"},
		{"an absolute entry in a stream", []*shoalv1.CopyToSandboxInput{startMsg(&shoalv1.CopyToSandboxStart{Name: "cp", Path: "/work"}), dataMsg(tarOf(t, tarEntry{name: "/etc/passwd", body: "x"}))}, "absolute"},
		{"a device file", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(tarOf(t, tarEntry{name: "src/sda", typ: tar.TypeBlock}))}, "device"},
		{"a hard link out", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(tarOf(t, tarEntry{name: "src/h", typ: tar.TypeLink, link: "/etc/passwd"}))}, "hard link"},
		{"not tar", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(bytes.Repeat([]byte("not a tar "), 100))}, "not a tar stream"},
		{"cut short", []*shoalv1.CopyToSandboxInput{startMsg(ok), dataMsg(tree[:1000])}, "middle of an entry"},
	} {
		_, err := copyMsgs(ctx, c, tc.msgs...)
		wantCode(t, tc.what, err, codes.InvalidArgument, tc.sub)
	}
	if got := sh(t, ctx, c, "cp", "ls /work; ls /etc | grep -c passwd || true"); got != "a\ndata\nlink\nmore\nrun.sh\nsrc\n0\n" {
		t.Fatalf("after the refused copies: %q", got)
	}

	// Copies out: a file, a directory, its contents, a link as a link or
	// (-L) what it points to.
	for _, tc := range []struct {
		req     *shoalv1.CopyFromSandboxRequest
		name    string
		typ     shoalv1.FileType
		entries string
	}{
		{&shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/renamed.txt"}, "renamed.txt", shoalv1.FileType_FILE_TYPE_REGULAR, "renamed.txt=one file"},
		{&shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/work/src"}, "src", shoalv1.FileType_FILE_TYPE_DIRECTORY, "src/ src/data=payload src/link->/etc/hostname src/run.sh=#!/bin/sh\necho hi\n"},
		{&shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/work/src/."}, ".", shoalv1.FileType_FILE_TYPE_DIRECTORY, "./ ./data=payload ./link->/etc/hostname ./run.sh=#!/bin/sh\necho hi\n"},
		{&shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/work/link"}, "link", shoalv1.FileType_FILE_TYPE_SYMLINK, "link->/etc/hostname"},
		{&shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/work/link", FollowLink: true}, "link", shoalv1.FileType_FILE_TYPE_REGULAR, "link=" + sh(t, ctx, c, "cp", "cat /etc/hostname")},
	} {
		st, entries, err := copyOut(ctx, c, tc.req)
		if err != nil || st.GetName() != tc.name || st.GetType() != tc.typ || strings.Join(entries, " ") != tc.entries {
			t.Errorf("copy out of %s (-L %v): %v %q, err %v; want %s %s %q", tc.req.Path, tc.req.FollowLink, st, entries, err, tc.name, tc.typ, tc.entries)
		}
	}
	_, _, err = copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "/no/such"})
	wantCode(t, "a missing source", err, codes.NotFound, "no such file or directory: /no/such")
	_, _, err = copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "cp", Path: "etc"})
	wantCode(t, "a relative source", err, codes.InvalidArgument, "path")

	// A stopped sandbox: both ways.
	job, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "job"},
		Spec: &shoalv1.SandboxSpec{Command: []string{"sh", "-c", "echo done > /result"}}}})
	if err != nil || job.Status.Phase != shoalv1.SandboxPhase_STOPPED {
		t.Fatalf("a sandbox whose command ended: %v %v", job.GetStatus(), err)
	}
	if _, entries, err := copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "job", Path: "/result"}); err != nil || strings.Join(entries, " ") != "result=done\n" {
		t.Fatalf("copy out of a stopped sandbox: %q %v", entries, err)
	}
	if _, err := copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "job", Path: "/", SourceName: "f.txt"}, file); err != nil {
		t.Fatalf("copy into a stopped sandbox: %v", err)
	}
	if _, entries, err := copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "job", Path: "/f.txt"}); err != nil || strings.Join(entries, " ") != "f.txt=one file" {
		t.Fatalf("what was copied into a stopped sandbox: %q %v", entries, err)
	}

	// A read-only root: refused naming the path; its tmpfs /tmp copied
	// through the running container, both ways.
	ro, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "ro"}, Spec: &shoalv1.SandboxSpec{ReadOnlyRoot: true}}})
	if err != nil || ro.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("a read-only sandbox: %v %v", ro.GetStatus(), err)
	}
	_, err = copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "ro", Path: "/etc", SourceName: "f.txt"}, file)
	wantCode(t, "into a read-only root", err, codes.FailedPrecondition, "/etc is on the sandbox's read-only root filesystem")
	if resp, err := copyIn(ctx, c, &shoalv1.CopyToSandboxStart{Name: "ro", Path: "/tmp", SourceName: "src", SourceDir: true}, tree); err != nil || resp.Path != "/tmp/src" {
		t.Fatalf("into a read-only sandbox's /tmp: %v %v", resp, err)
	}
	if got := sh(t, ctx, c, "ro", "cat /tmp/src/data; stat -c ' %a %Y' /tmp/src/data /tmp/src/run.sh; readlink /tmp/src/link"); got != "payload 600 1623056950\n 755 1623053350\n/etc/hostname\n" {
		t.Fatalf("what landed in a read-only sandbox's /tmp: %q", got)
	}
	if st, entries, err := copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "ro", Path: "/tmp/src"}); err != nil || st.Name != "src" || st.Mode != 0o750 ||
		strings.Join(entries, " ") != "./src/ ./src/data=payload ./src/link->/etc/hostname ./src/run.sh=#!/bin/sh\necho hi\n" {
		t.Fatalf("out of a read-only sandbox's /tmp: %v %q %v", st, entries, err)
	}
	_, _, err = copyOut(ctx, c, &shoalv1.CopyFromSandboxRequest{Name: "ro", Path: "/tmp/none"})
	wantCode(t, "a missing source in /tmp", err, codes.NotFound, "/tmp/none")
}
