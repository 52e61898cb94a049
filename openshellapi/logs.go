package openshellapi

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"shoal"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
)

// Logs: a sandbox's log lines are its container's output, read through
// shoal's Logs (the owner's engine, relayed by a non-owner), split into
// lines. OpenShell's lines come from its gateway and its sandbox
// supervisor, with levels; shoal's are the container's stdout and stderr:
// source "sandbox", level INFO, the stream in fields["stream"], and the
// time the line was read (the engine's log carries no time shoal reads).
// So a filter by source keeps every line if it names "sandbox" and none
// otherwise; one by level keeps every line up to INFO and none above; a
// filter by time (since_ms, log_since_ms) cannot be honoured and is
// refused.

const (
	// logSource, logLevel and logTarget are what every line says.
	logSource = "sandbox"
	logLevel  = "INFO"
	logTarget = "container"
	// defaultLogLines is GetSandboxLogs' lines, and WatchSandbox's
	// log_tail_lines, when 0 (OpenShell's tail default); maxLogLines the
	// most GetSandboxLogs returns.
	defaultLogLines = 200
	maxLogLines     = 10000
	// maxLogLine cuts a line that long without a newline into lines of
	// that size, so a command that never writes one costs bounded memory.
	maxLogLine = 16 << 10
	// maxLogResponse bounds GetSandboxLogs' response: the oldest lines
	// beyond it are left out (buffer_total still counts them).
	maxLogResponse = 4 << 20
)

// levels orders OpenShell's log levels.
var levels = []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

// wantLogs reports whether a request's source and level filters keep the
// container's lines; fields name the request's fields.
func wantLogs(sourcesField string, sources []string, levelField, minLevel string) (bool, error) {
	keep := len(sources) == 0
	for i, src := range sources {
		switch src {
		case logSource:
			keep = true
		case "gateway":
		default:
			return false, invalid(sourcesField, "[%d] %q is not a log source (sandbox or gateway)", i, truncate(src))
		}
	}
	if minLevel != "" {
		i := slices.Index(levels, strings.ToUpper(minLevel))
		if i < 0 {
			return false, invalid(levelField, "%q is not a log level (%s)", truncate(minLevel), strings.Join(levels, ", "))
		}
		if i > slices.Index(levels, logLevel) {
			keep = false
		}
	}
	return keep, nil
}

// lineSplitter turns a container's output chunks into log lines, one
// partial line kept per stream.
type lineSplitter struct {
	id      string // the sandbox's id
	partial map[string][]byte
	emit    func(*openshellv1.SandboxLogLine) error
}

func newLineSplitter(id string, emit func(*openshellv1.SandboxLogLine) error) *lineSplitter {
	return &lineSplitter{id: id, partial: map[string][]byte{}, emit: emit}
}

func (l *lineSplitter) chunk(c *shoalv1.LogsChunk) error {
	stream := c.Stream
	buf := append(l.partial[stream], c.Data...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 && len(buf) < maxLogLine {
			break
		}
		n := min(maxLogLine, len(buf))
		if i >= 0 && i < n {
			n = i + 1
		}
		if err := l.line(stream, buf[:n]); err != nil {
			return err
		}
		buf = buf[n:]
	}
	l.partial[stream] = append([]byte(nil), buf...)
	return nil
}

// flush emits the partial lines left at the end of the log.
func (l *lineSplitter) flush() error {
	for _, stream := range []string{"stdout", "stderr"} {
		if b := l.partial[stream]; len(b) > 0 {
			if err := l.line(stream, b); err != nil {
				return err
			}
			l.partial[stream] = nil
		}
	}
	return nil
}

func (l *lineSplitter) line(stream string, b []byte) error {
	msg := strings.TrimRight(strings.ToValidUTF8(string(b), "\uFFFD"), "\r\n")
	return l.emit(&openshellv1.SandboxLogLine{
		SandboxId:   l.id,
		TimestampMs: time.Now().UnixMilli(),
		Level:       logLevel,
		Target:      logTarget,
		Message:     msg,
		Source:      logSource,
		Fields:      map[string]string{"stream": stream},
	})
}

// containerLogs runs shoal's Logs for the sandbox ws/name (id) with follow
// and tail (0: all), each line to emit, until the log ends (or, with
// follow, ctx does).
func (s *Server) containerLogs(ctx context.Context, id, ws, name string, follow bool, tail int, emit func(*openshellv1.SandboxLogLine) error) error {
	split := newLineSplitter(id, emit)
	err := s.api.Logs(&shoalv1.LogsRequest{Workspace: ws, Name: name, Follow: follow, TailLines: int32(tail)},
		&shoalStream[struct{}, *shoalv1.LogsChunk]{ctx: ctx, send: split.chunk})
	if err != nil {
		return err
	}
	return split.flush()
}

func (s *Server) GetSandboxLogs(ctx context.Context, req *openshellv1.GetSandboxLogsRequest) (*openshellv1.GetSandboxLogsResponse, error) {
	if req.SinceMs != 0 {
		return nil, invalid("since_ms", "is not served: shoal reads no time of a container's log lines; ask for the last lines instead")
	}
	keep, err := wantLogs("sources", req.Sources, "min_level", req.MinLevel)
	if err != nil {
		return nil, err
	}
	lines := int(req.Lines)
	switch {
	case lines == 0:
		lines = defaultLogLines
	case lines > maxLogLines:
		return nil, invalid("lines", "%d is more than %d", lines, maxLogLines)
	}
	w, name, err := s.sandboxRef(ctx, "sandbox_id", req.SandboxId)
	if err != nil {
		return nil, err
	}
	if req.Workspace != "" && req.Workspace != w {
		return nil, shoal.GRPCStatus(shoal.NotFound("sandbox with id %q not found in workspace %q", req.SandboxId, req.Workspace))
	}
	out := &openshellv1.GetSandboxLogsResponse{}
	if !keep {
		return out, nil
	}
	size := 0
	err = s.containerLogs(ctx, req.SandboxId, w, name, false, lines, func(l *openshellv1.SandboxLogLine) error {
		out.Logs = append(out.Logs, l)
		out.BufferTotal++
		size += proto.Size(l) + 8
		// The newest lines that fit: drop the oldest.
		for size > maxLogResponse && len(out.Logs) > 0 {
			size -= proto.Size(out.Logs[0]) + 8
			out.Logs = out.Logs[1:]
		}
		return nil
	})
	if err != nil {
		return nil, grpcError(err, false, "tail_lines", "lines")
	}
	return out, nil
}
