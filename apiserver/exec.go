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
	id, remote, err := s.container(ctx, req.Workspace, req.Name, true)
	if err != nil {
		return err
	}
	release, err := s.execs.acquire()
	if err != nil {
		return err
	}
	defer release()
	if remote != nil {
		// Cancelling the call's context (the caller went away) ends the
		// owner's call, and the owner kills the command. An owner that
		// dies kills nothing; it reaps the exec when it is back
		// (agent/execs.go).
		fwd, err := remote.client.Exec(remote.ctx, req)
		if err != nil {
			return err
		}
		return relay(remote, s.cfg.Node, "exec", fwd, stream.Send)
	}
	return s.runExec(ctx, id, spec, stream.Send)
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
	id, remote, err := s.container(ctx, req.Workspace, req.Name, true)
	if err != nil {
		return err
	}
	release, err := s.execs.acquire()
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
		fwd, err := remote.client.ExecInteractive(remote.ctx)
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
					}
					return
				}
				if fwd.Send(m) != nil {
					return
				}
			}
		}()
		return relay(remote, s.cfg.Node, "exec", fwd, stream.Send)
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
				// A half-close ends stdin; a broken call ends ctx too.
				stdinW.CloseWithError(err)
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
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // the caller's bad message ended the command
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
			if _, err := strconv.ParseUint(n, 10, 32); err != nil {
				return spec, shoal.Invalid(prefix+"user", "%q: ids are at most %d", u, uint32(1<<32-1))
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
