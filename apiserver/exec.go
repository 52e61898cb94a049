package apiserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Execs: a command run in a sandbox's running container, by its owner
// (other nodes relay the call, forward.go). Exec takes its whole stdin in
// the request; ExecInteractive streams stdin, terminal resizes and the
// close of stdin after a first message that starts the command. Both
// count against --max-execs, take the same options (workdir, env, timeout,
// user, tty) and end with the exit code; the runtime kills the command's
// process group when the call ends early, or at the timeout (124).

// MaxExecTimeout bounds an exec's timeout: longer is no timeout at all.
const MaxExecTimeout = 30 * 24 * time.Hour

// maxTermSize bounds a terminal's rows and columns (the kernel's winsize
// holds 16 bits).
const maxTermSize = 1<<16 - 1

// execUser is "UID" or "UID:GID", numbers only: a name would be looked up
// in the image's /etc/passwd, which the sandbox's own command may change.
var execUser = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)

func (s *Server) Exec(req *shoalv1.ExecRequest, stream shoalv1.Shoal_ExecServer) error {
	spec, err := execSpec("", req)
	if err != nil {
		return err
	}
	if len(req.Stdin) > 0 {
		spec.Stdin = io.NopCloser(bytes.NewReader(req.Stdin))
	}
	ctx := stream.Context()
	id, remote, release, err := s.execSlot(ctx, req)
	if err != nil {
		return err
	}
	defer release()
	if remote != nil {
		// Cancelling the call's context (the caller went away) ends the
		// owner's call, and the owner kills the command. An owner that
		// dies kills nothing; it reaps the exec when it is back
		// (agent/execs.go).
		if !hasExecOptions(req) {
			fwd, err := remote.client.Exec(remote.ctx, req)
			if err != nil {
				return err
			}
			return relay(remote, s.cfg.Node, "exec", fwd, stream.Send)
		}
		// Options an owner of an older version would ignore (and run the
		// command as the image's user, with no deadline): the call goes
		// to it as ExecInteractive, which such an owner refuses
		// (UNIMPLEMENTED) instead.
		fwd, err := remote.client.ExecInteractive(remote.ctx)
		if err != nil {
			return err
		}
		start := proto.CloneOf(req)
		start.Stdin = nil
		msgs := []*shoalv1.ExecInput{{Input: &shoalv1.ExecInput_Start{Start: start}}}
		for in := req.Stdin; len(in) > 0; {
			n := min(len(in), 1<<20)
			msgs = append(msgs, &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Stdin{Stdin: in[:n]}})
			in = in[n:]
		}
		for _, m := range msgs {
			if err := fwd.Send(m); err != nil {
				break // the owner ended the call: relay reads why
			}
		}
		_ = fwd.CloseSend() // ends the command's stdin
		return relay(remote, s.cfg.Node, "exec", fwd, stream.Send)
	}
	return s.runExec(ctx, id, spec, stream.Send)
}

// execSlot finds the container of req's sandbox (here, or remote: its
// owner) and takes one of this node's --max-execs slots for the call;
// release gives it back.
func (s *Server) execSlot(ctx context.Context, req *shoalv1.ExecRequest) (id string, remote *ownerCall, release func(), err error) {
	return s.streamSlot(ctx, req.Workspace, req.Name, true)
}

// streamSlot is execSlot for any call on a sandbox's container: running
// says whether the container must run (an exec), or only exist (a copy).
func (s *Server) streamSlot(ctx context.Context, w, name string, running bool) (id string, remote *ownerCall, release func(), err error) {
	id, remote, err = s.container(ctx, w, name, running)
	if err != nil {
		return "", nil, nil, err
	}
	release, err = s.execs.acquire()
	if err != nil {
		return "", nil, nil, err
	}
	return id, remote, release, nil
}

// hasExecOptions reports whether req sets any option beyond the command
// and its stdin (the fields an Exec had before there were options).
func hasExecOptions(req *shoalv1.ExecRequest) bool {
	return req.Workdir != "" || len(req.Env) > 0 || req.Timeout != nil || req.User != "" || req.Tty || req.TerminalSize != nil
}

// runExec runs an exec on this node's runtime and streams its output and
// exit code with send. The output has no total cap: it streams in chunks
// of at most MaxChunk as it is produced, and gRPC flow control holds the
// command back while the client is slow. If the call ends early the
// runtime kills the command (the stream's context ends with the call, or
// at Shutdown).
func (s *Server) runExec(ctx context.Context, id string, spec shoal.ExecSpec, send func(*shoalv1.ExecChunk) error) error {
	res, err := s.cfg.Runtime.Exec(ctx, id, spec,
		&chunkWriter[*shoalv1.ExecChunk]{send: send, wrap: execChunk("stdout")},
		&chunkWriter[*shoalv1.ExecChunk]{send: send, wrap: execChunk("stderr")})
	if err != nil {
		return err
	}
	return send(&shoalv1.ExecChunk{Exited: true, ExitCode: int32(res.ExitCode), TimedOut: res.TimedOut})
}

func (s *Server) ExecInteractive(stream shoalv1.Shoal_ExecInteractiveServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return shoal.Invalid("start", "the call ended before its first message, which starts the command")
	}
	if err != nil {
		return err
	}
	req := first.GetStart()
	if req == nil {
		return shoal.Invalid("start", "is required in the first message, and only there")
	}
	if len(req.Stdin) > 0 {
		return shoal.Invalid("start.stdin", "must be empty: an interactive exec streams its stdin in the messages after the first")
	}
	spec, err := execSpec("start.", req)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	id, remote, release, err := s.execSlot(ctx, req)
	if err != nil {
		return err
	}
	defer release()

	// One goroutine reads the caller's messages while this one streams the
	// output. It is not waited for: it may be blocked in Recv, which only
	// the caller (a message, a half-close) or the end of the call can
	// release, and grpc ends a pending Recv as soon as this handler
	// returns. It touches nothing of the handler's once the command has
	// ended: its writes go to a closed pipe, and the runtime no longer
	// reads resizes.
	if remote != nil {
		// As for Exec: the caller's going away ends the owner's call, and
		// the owner kills the command.
		// A broken input stream (not a half-close) ends the owner's
		// call with its cause: it must not look like the end of stdin.
		fctx, fcancel := context.WithCancelCause(remote.ctx)
		defer fcancel(nil)
		fwd, err := remote.client.ExecInteractive(fctx)
		if err != nil {
			return err
		}
		if err := fwd.Send(first); err != nil && !errors.Is(err, io.EOF) {
			return err // io.EOF: the owner ended the call; relay reads why
		}
		go func() {
			for {
				m, err := stream.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						_ = fwd.CloseSend()
					} else if brokenInput(err) {
						fcancel(err)
					}
					return
				}
				if fwd.Send(m) != nil {
					return
				}
			}
		}()
		err = relay(remote, s.cfg.Node, "exec", fwd, stream.Send)
		if cause := context.Cause(fctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdin, stdinW := io.Pipe()
	resize := make(chan shoal.TermSize, 1)
	spec.Stdin, spec.Resize = stdin, resize
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				// A half-close ends stdin. Anything else (a message too
				// large or that does not decode, a call that broke) ends
				// the command: cut-short input must not read as its end.
				stdinW.CloseWithError(err)
				if brokenInput(err) {
					cancel(err)
				}
				return
			}
			switch in := m.Input.(type) {
			case *shoalv1.ExecInput_Stdin:
				// Blocks while the command does not read: flow control
				// holds the caller back. Fails once the command has ended
				// (the runtime closes stdin).
				if _, err := stdinW.Write(in.Stdin); err != nil {
					return
				}
			case *shoalv1.ExecInput_CloseStdin:
				if !in.CloseStdin {
					cancel(shoal.Invalid("close_stdin", "must be true when set (it closes the command's stdin)"))
					return
				}
				stdinW.Close()
			case *shoalv1.ExecInput_Resize:
				sz, err := termSize("resize", in.Resize)
				if err != nil {
					cancel(err)
					return
				}
				// Only the latest size matters: replace one not yet read.
				select {
				case <-resize:
				default:
				}
				resize <- sz
			case *shoalv1.ExecInput_Start:
				cancel(shoal.Invalid("start", "is allowed in the first message only"))
				return
			default:
				cancel(shoal.Invalid("input", "a message carries none of start, stdin, close_stdin or resize"))
				return
			}
		}
	}()
	err = s.runExec(ctx, id, spec, stream.Send)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // the caller's bad message or broken stream ended the command
	}
	return err
}

// execSpec validates an exec request's command and options and returns
// them as the runtime takes them (without stdin). prefix names the
// request's field ("" or "start.").
func execSpec(prefix string, req *shoalv1.ExecRequest) (shoal.ExecSpec, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return shoal.ExecSpec{}, err
	}
	if len(req.Command) == 0 {
		return shoal.ExecSpec{}, shoal.Invalid(prefix+"command", "is required")
	}
	if err := validCommand(prefix+"command", req.Command); err != nil {
		return shoal.ExecSpec{}, err
	}
	spec := shoal.ExecSpec{Command: req.Command, WorkDir: req.Workdir, User: req.User, TTY: req.Tty}
	if w := req.Workdir; w != "" {
		if w[0] != '/' || len(w) > 4096 {
			return spec, shoal.Invalid(prefix+"workdir", "%q is not an absolute path (at most 4096 bytes)", trunc(w))
		}
		if err := validText(prefix+"workdir", w, false); err != nil {
			return spec, err
		}
	}
	if err := validEnvMap(prefix+"env", req.Env, MaxEnv); err != nil {
		return spec, err
	}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		spec.Env = append(spec.Env, k+"="+req.Env[k])
	}
	if t := req.Timeout; t != nil {
		if err := t.CheckValid(); err != nil {
			return spec, shoal.Invalid(prefix+"timeout", "%v", err)
		}
		d := t.AsDuration()
		if d <= 0 || d > MaxExecTimeout {
			return spec, shoal.Invalid(prefix+"timeout", "%s is out of range: more than 0 and at most %s (unset: none)", d, MaxExecTimeout)
		}
		spec.Timeout = d
	}
	if u := req.User; u != "" {
		if !execUser.MatchString(u) {
			return spec, shoal.Invalid(prefix+"user", "%q is not UID or UID:GID (numbers)", trunc(u))
		}
		for n := range strings.SplitSeq(u, ":") {
			// 4294967295 is (uid_t)-1, which set*id reads as "unchanged".
			if v, err := strconv.ParseUint(n, 10, 32); err != nil || v == 1<<32-1 {
				return spec, shoal.Invalid(prefix+"user", "%q: ids are at most %d", u, uint32(1<<32-2))
			}
		}
	}
	if req.TerminalSize != nil {
		if !req.Tty {
			return spec, shoal.Invalid(prefix+"terminal_size", "is set without tty")
		}
		sz, err := termSize(prefix+"terminal_size", req.TerminalSize)
		if err != nil {
			return spec, err
		}
		spec.Size = sz
	}
	return spec, nil
}

func termSize(field string, t *shoalv1.TerminalSize) (shoal.TermSize, error) {
	if t.GetRows() == 0 || t.GetCols() == 0 || t.GetRows() > maxTermSize || t.GetCols() > maxTermSize {
		return shoal.TermSize{}, shoal.Invalid(field, "%dx%d is out of range: rows and cols 1-%d", t.GetRows(), t.GetCols(), maxTermSize)
	}
	return shoal.TermSize{Rows: uint(t.GetRows()), Cols: uint(t.GetCols())}, nil
}

// brokenInput reports whether err, from a Recv of the caller's messages,
// is input that broke (a message too large or that does not decode), not
// its end: a half-close (io.EOF) ends stdin, and a caller that went away
// has ended the call's context already.
func brokenInput(err error) bool {
	return !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled && status.Code(err) != codes.DeadlineExceeded
}
