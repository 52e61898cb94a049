package openshellapi

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/store"
)

// WatchSandbox: the sandbox as it is now, always first; then, as they
// happen, its changes (follow_status), its container's log lines
// (follow_logs, after the last log_tail_lines of them) and its events
// (follow_events, after the last event_tail of them). The stream ends OK
// when the sandbox is removed (or its name taken by a new one), or, with
// stop_on_terminal, after a sandbox message whose phase is READY or ERROR
// (the first one included).
//
// Each part is a shoal.v1 stream called in process: the sandbox's changes
// are WatchSandboxes of its one key from the first message's revision
// (served from the watch cache's event log: no etcd watch of its own),
// the lines are Logs with follow (from the owner's engine, relayed by a
// non-owner), the events WatchEvents of its uid. Each takes the slot its
// twin would (--max-watches, --max-execs). They feed one bounded queue,
// which this handler alone sends from: a client that leaves it full for
// store.SlowWatcherGrace has its watch ended with RESOURCE_EXHAUSTED (as a
// shoal.v1 watch whose reader fell behind), so a slow client costs bounded
// memory; the engine's log and etcd hold what it has not read yet.

// watchQueue is how many messages wait for a slow client.
const watchQueue = 256

// errWatchDone ends a watch OK: the sandbox is gone, or terminal with
// stop_on_terminal.
var errWatchDone = errors.New("the watch is done")

// terminal reports whether a phase ends a stop_on_terminal watch.
func terminal(sb *openshellv1.Sandbox) bool {
	switch sb.GetStatus().GetPhase() {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_READY, openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR:
		return true
	}
	return false
}

func sandboxEvent(sb *openshellv1.Sandbox) *openshellv1.SandboxStreamEvent {
	return &openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Sandbox{Sandbox: sb}}
}

// platformEvent is OpenShell's form of one of shoal's sandbox events: its
// type the severity (Normal, Warning), its source what recorded it (api,
// agent, leader), the rest in metadata.
func platformEvent(e *shoalv1.Event) *openshellv1.PlatformEvent {
	md := maps.Clone(e.Details)
	if md == nil {
		md = map[string]string{}
	}
	md["node"] = e.Node
	md["reporting_node"] = e.ReportingNode
	md["count"] = strconv.Itoa(int(e.Count))
	md["sandbox"] = e.Sandbox
	md["workspace"] = e.Workspace
	typ := "Normal"
	if e.Severity == shoalv1.EventSeverity_WARNING {
		typ = "Warning"
	}
	return &openshellv1.PlatformEvent{TimestampMs: millis(e.LastTime), Source: e.Reporter, Type: typ, Reason: e.Reason, Message: e.Message, Metadata: md}
}

// watchQueueOf is the queue a watch's parts feed.
type watchQueueOf struct {
	ctx context.Context
	out chan *openshellv1.SandboxStreamEvent
}

// push queues m, waiting up to store.SlowWatcherGrace for room.
func (q *watchQueueOf) push(m *openshellv1.SandboxStreamEvent) error {
	select {
	case q.out <- m:
		return nil
	case <-q.ctx.Done():
		return q.ctx.Err()
	default:
	}
	t := time.NewTimer(store.SlowWatcherGrace)
	defer t.Stop()
	select {
	case q.out <- m:
		return nil
	case <-q.ctx.Done():
		return q.ctx.Err()
	case <-t.C:
		return shoal.ResourceExhausted("watch ended: its client fell too far behind (%d messages unread for %s); watch again", cap(q.out), store.SlowWatcherGrace)
	}
}

func (s *Server) WatchSandbox(req *openshellv1.WatchSandboxRequest, stream openshellv1.OpenShell_WatchSandboxServer) error {
	if req.LogSinceMs != 0 {
		return invalid("log_since_ms", "is not served: shoal reads no time of a container's log lines; use log_tail_lines")
	}
	logs, err := wantLogs("log_sources", req.LogSources, "log_min_level", req.LogMinLevel)
	if err != nil {
		return err
	}
	logs = logs && req.FollowLogs
	if req.LogTailLines > maxLogLines {
		return invalid("log_tail_lines", "%d is more than %d", req.LogTailLines, maxLogLines)
	}
	ctx := stream.Context()
	if logs {
		// The container's output is an operator's to read (shoal's Logs),
		// not every viewer's who may watch the record.
		if err := s.api.AuthorizeAs(ctx, "/shoal.v1.Shoal/Logs"); err != nil {
			return grpcError(err, false)
		}
	}
	w, name, err := s.sandboxRef(ctx, "id", req.Id)
	if err != nil {
		return err
	}
	// The changes follow on from the revision this read reflects, not
	// from the record's own (which, for a sandbox that has not changed in
	// a while, may be older than the watch cache's log and compacted away
	// in etcd).
	cur, rev, err := s.cfg.Store.GetSandboxAt(ctx, w, name)
	if err == nil && cur.GetMeta().GetUid() != req.Id {
		err = shoal.NotFound("sandbox with id %q not found (its name now has another)", req.Id)
	}
	if err != nil {
		return grpcError(err, false)
	}
	first := sandboxOf(cur)
	if err := stream.Send(sandboxEvent(first)); err != nil {
		return err
	}
	if req.StopOnTerminal && terminal(first) {
		return nil
	}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := &watchQueueOf{ctx: wctx, out: make(chan *openshellv1.SandboxStreamEvent, watchQueue)}
	// changed wakes the log part when the sandbox changed: a container
	// that did not exist yet may now.
	changed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	part := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				cancel(err) // the first cause stays
			}
		})
	}
	part(func() error {
		return s.followStatus(wctx, req, w, name, cur.GetMeta().GetResourceVersion(), max(rev, cur.GetMeta().GetResourceVersion()), q, changed)
	})
	if logs {
		tail := int(req.LogTailLines)
		if tail == 0 {
			tail = defaultLogLines
		}
		part(func() error { return s.followLogs(wctx, req.Id, w, name, tail, q, changed) })
	}
	if req.FollowEvents {
		part(func() error { return s.followEvents(wctx, req, w, name, q) })
	}
	go func() { wg.Wait(); close(q.out) }() // ends with the parts, which end with wctx

	var sendErr error
	for m := range q.out {
		if sendErr != nil {
			continue // drain until the parts have ended
		}
		if sendErr = stream.Send(m); sendErr != nil {
			cancel(sendErr)
		}
	}
	if sendErr != nil {
		return sendErr
	}
	switch cause := context.Cause(wctx); {
	case errors.Is(cause, errWatchDone):
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	default:
		return grpcError(cause, false)
	}
}

// followStatus queues the sandbox's changes after revision rev until it is
// gone (errWatchDone), or terminal with stop_on_terminal; seen is the
// version already sent (nothing at or before it is sent again).
func (s *Server) followStatus(ctx context.Context, req *openshellv1.WatchSandboxRequest, w, name string, seen, rev int64, q *watchQueueOf, changed chan<- struct{}) error {
	send := func(ev *shoalv1.WatchEvent) error {
		sb := ev.GetSandbox()
		if ev.Type == shoalv1.EventType_DELETED || sb.GetMeta().GetUid() != req.Id {
			return errWatchDone // removed, or removed and made again
		}
		if sb.GetMeta().GetResourceVersion() <= seen {
			return nil
		}
		select {
		case changed <- struct{}{}:
		default:
		}
		o := sandboxOf(sb)
		if req.FollowStatus {
			if err := q.push(sandboxEvent(o)); err != nil {
				return err
			}
		}
		if req.StopOnTerminal && terminal(o) {
			return errWatchDone
		}
		return nil
	}
	err := s.api.WatchSandboxes(&shoalv1.WatchSandboxesRequest{Workspace: w, Name: name, ResourceVersion: rev},
		&shoalStream[struct{}, *shoalv1.WatchEvent]{ctx: ctx, send: send})
	if err == nil && ctx.Err() == nil {
		// A watch that ends by itself only ends with an error.
		err = shoal.Unavailable("the sandbox watch ended; watch again")
	}
	return err
}

// followLogs queues the container's log lines: the last tail, then as
// they come. A sandbox without a container yet (provisioning) is tried
// again at each change of it; the lines end when the container's log does
// (the container stopped).
func (s *Server) followLogs(ctx context.Context, id, w, name string, tail int, q *watchQueueOf, changed <-chan struct{}) error {
	emit := func(l *openshellv1.SandboxLogLine) error {
		return q.push(&openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Log{Log: l}})
	}
	for {
		err := s.containerLogs(ctx, id, w, name, true, tail, emit)
		if status.Code(shoal.GRPCStatus(err)) != codes.FailedPrecondition || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// followEvents queues the sandbox's events: the last event_tail of them,
// then as they are written.
func (s *Server) followEvents(ctx context.Context, req *openshellv1.WatchSandboxRequest, w, name string, q *watchQueueOf) error {
	push := func(e *shoalv1.Event) error {
		return q.push(&openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Event{Event: platformEvent(e)}})
	}
	from := int64(0)
	if req.EventTail > 0 {
		list, err := s.api.ListEvents(ctx, &shoalv1.ListEventsRequest{Workspace: w, Sandbox: name, SandboxUid: req.Id,
			Limit: int32(min(req.EventTail, apiserver.MaxEventLimit))})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if err := push(e); err != nil {
				return err
			}
		}
		from = list.ResourceVersion
	}
	err := s.api.WatchEvents(&shoalv1.WatchEventsRequest{Workspace: w, Sandbox: name, SandboxUid: req.Id, ResourceVersion: from},
		&shoalStream[struct{}, *shoalv1.Event]{ctx: ctx, send: push})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
