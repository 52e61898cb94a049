package openshellapi

import (
	"errors"
	"io"
	"regexp"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
)

// ExecSandbox and ExecSandboxInteractive are shoal's Exec and
// ExecInteractive (package apiserver, exec.go): the same validation, the
// same --max-execs slot, the same relay to the owning node, the same exit
// code 124 at a timeout. Output chunks go out as they come, stdout and
// stderr apart (a tty has one stream, stdout), then exactly one exit
// event. A sandbox whose command cannot run (not READY: no container yet,
// stopped, exited, paused, being deleted) is FAILED_PRECONDITION, from
// shoal's own check. Nothing wraps the command: a command that writes no
// stderr sends no stderr event.

// envKey is what OpenShell accepts as an environment variable name
// (shoal's own rule, checked after it, also refuses its reserved names).
var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// execFields maps shoal's exec request fields to OpenShell's in errors,
// for both methods (the interactive one's are under "start.").
var execFields = []string{
	"start.terminal_size", "start.cols",
	"start.timeout", "start.timeout_seconds",
	"start.env", "start.environment",
	"terminal_size", "cols",
	"timeout", "timeout_seconds",
	"input", "payload",
	"env", "environment",
}

// execRequest is shoal's request for OpenShell's, on the sandbox ws/name;
// prefix names its fields in errors ("" or "start."). Its stdin is left
// out: Exec takes it in the request, ExecInteractive as messages.
func execRequest(prefix, ws, name string, r *openshellv1.ExecSandboxRequest) (*shoalv1.ExecRequest, error) {
	if len(r.Command) == 0 {
		return nil, invalid(prefix+"command", "is required (the program and its arguments)")
	}
	for k := range r.Environment {
		if !envKey.MatchString(k) {
			return nil, invalid(prefix+"environment", "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", truncate(k))
		}
	}
	out := &shoalv1.ExecRequest{Workspace: ws, Name: name, Command: r.Command, Workdir: r.Workdir, Env: r.Environment, Tty: r.Tty}
	if r.TimeoutSeconds > 0 {
		out.Timeout = durationpb.New(time.Duration(r.TimeoutSeconds) * time.Second)
	}
	// A size without a terminal means nothing (OpenShell ignores it);
	// with one, a size of 0 is the engine's default.
	if r.Tty && r.Cols > 0 && r.Rows > 0 {
		out.TerminalSize = &shoalv1.TerminalSize{Rows: r.Rows, Cols: r.Cols}
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// execEvent is OpenShell's event for one of shoal's exec chunks.
func execEvent(c *shoalv1.ExecChunk) *openshellv1.ExecSandboxEvent {
	switch {
	case c.Exited:
		return &openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Exit{Exit: &openshellv1.ExecSandboxExit{ExitCode: c.ExitCode}}}
	case c.Stream == "stderr":
		return &openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Stderr{Stderr: &openshellv1.ExecSandboxStderr{Data: c.Data}}}
	default:
		return &openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{Data: c.Data}}}
	}
}

func (s *Server) ExecSandbox(req *openshellv1.ExecSandboxRequest, stream openshellv1.OpenShell_ExecSandboxServer) error {
	ctx := stream.Context()
	// The request's own fields first: bad input costs no lookup.
	if _, err := execRequest("", "", "", req); err != nil {
		return err
	}
	ws, name, err := s.sandboxRef(ctx, "sandbox_id", req.SandboxId)
	if err != nil {
		return err
	}
	sreq, err := execRequest("", ws, name, req)
	if err != nil {
		return err
	}
	sreq.Stdin = req.Stdin
	err = s.api.Exec(sreq, &shoalStream[struct{}, *shoalv1.ExecChunk]{ctx: ctx, caller: stream,
		send: func(c *shoalv1.ExecChunk) error { return stream.Send(execEvent(c)) }})
	return grpcError(err, false, execFields...)
}

func (s *Server) ExecSandboxInteractive(stream openshellv1.OpenShell_ExecSandboxInteractiveServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("start", "the call ended before its first message, which must be start")
	}
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return invalid("start", "is required in the first message (then stdin and resize messages)")
	}
	if _, err := execRequest("start.", "", "", start); err != nil {
		return err
	}
	ws, name, err := s.sandboxRef(ctx, "start.sandbox_id", start.SandboxId)
	if err != nil {
		return err
	}
	sreq, err := execRequest("start.", ws, name, start)
	if err != nil {
		return err
	}
	// shoal's start carries no stdin: bytes in OpenShell's start are the
	// first stdin message.
	pending := []*shoalv1.ExecInput{{Input: &shoalv1.ExecInput_Start{Start: sreq}}}
	if len(start.Stdin) > 0 {
		pending = append(pending, &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Stdin{Stdin: start.Stdin}})
	}
	// ExecInteractive calls recv first from its own goroutine, then from
	// the one goroutine that reads the caller's messages: one at a time.
	recv := func() (*shoalv1.ExecInput, error) {
		if len(pending) > 0 {
			m := pending[0]
			pending = pending[1:]
			return m, nil
		}
		m, err := stream.Recv()
		if err != nil {
			return nil, err // io.EOF: the caller half-closed, stdin ends
		}
		return execInput(m), nil
	}
	err = s.api.ExecInteractive(&shoalStream[*shoalv1.ExecInput, *shoalv1.ExecChunk]{ctx: ctx, caller: stream, recv: recv,
		send: func(c *shoalv1.ExecChunk) error { return stream.Send(execEvent(c)) }})
	return grpcError(err, false, execFields...)
}

// execInput is shoal's message for one of OpenShell's after the first. A
// second start, and a message with no payload, go on as they are for
// ExecInteractive to refuse (INVALID_ARGUMENT naming start, payload).
func execInput(m *openshellv1.ExecSandboxInput) *shoalv1.ExecInput {
	switch in := m.Payload.(type) {
	case *openshellv1.ExecSandboxInput_Stdin:
		return &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Stdin{Stdin: in.Stdin}}
	case *openshellv1.ExecSandboxInput_Resize:
		return &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Resize{Resize: &shoalv1.TerminalSize{Rows: in.Resize.GetRows(), Cols: in.Resize.GetCols()}}}
	case *openshellv1.ExecSandboxInput_Start:
		return &shoalv1.ExecInput{Input: &shoalv1.ExecInput_Start{Start: &shoalv1.ExecRequest{}}}
	default:
		return &shoalv1.ExecInput{}
	}
}
