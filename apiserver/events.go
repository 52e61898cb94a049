package apiserver

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/events"
	"shoal/store"
)

// Events is what the API needs of package events: it records the deletion
// requests it takes (DeleteRequested, by whom). Record never blocks and
// never fails.
type Events interface {
	Record(sb *shoalv1.Sandbox, e events.Event)
}

var _ Events = (*events.Recorder)(nil)

// Bounds of ListEvents.
const (
	// DefaultEventLimit is the newest events a list returns when it does
	// not say how many; MaxEventLimit the most it may ask for.
	DefaultEventLimit = 500
	MaxEventLimit     = 5000
	// maxEventListBytes bounds the events of one response, well within
	// shoal.MaxResponseBytes: the oldest beyond it are omitted.
	maxEventListBytes = 4 << 20
)

// ListEvents returns the newest events that match, newest last.
func (s *Server) ListEvents(ctx context.Context, req *shoalv1.ListEventsRequest) (*shoalv1.ListEventsResponse, error) {
	f, err := eventFilter(req.Workspace, req.Sandbox, req.SandboxUid, req.Node)
	if err != nil {
		return nil, err
	}
	limit := int(req.Limit)
	switch {
	case limit < 0 || limit > MaxEventLimit:
		return nil, shoal.Invalid("limit", "%d is not between 0 and %d (0: the newest %d)", limit, MaxEventLimit, DefaultEventLimit)
	case limit == 0:
		limit = DefaultEventLimit
	}
	list, err := s.cfg.Store.EventLog().ListEvents(ctx, f, limit)
	if err != nil {
		return nil, err
	}
	// The newest that fit a response; the older ones are omitted.
	size, keep := 0, len(list.Items)
	for keep > 0 {
		size += proto.Size(list.Items[keep-1]) + 8
		if size > maxEventListBytes {
			break
		}
		keep--
	}
	omitted := list.Omitted + keep
	return &shoalv1.ListEventsResponse{Items: slices.Clone(list.Items[keep:]), ResourceVersion: list.Revision, Omitted: int32(omitted)}, nil
}

// WatchEvents streams the events that match as they are written.
func (s *Server) WatchEvents(req *shoalv1.WatchEventsRequest, stream shoalv1.Shoal_WatchEventsServer) error {
	f, err := eventFilter(req.Workspace, req.Sandbox, req.SandboxUid, req.Node)
	if err != nil {
		return err
	}
	if req.ResourceVersion < 0 {
		return shoal.Invalid("resource_version", "must not be negative")
	}
	release, err := s.watches.acquire()
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(stream.Context())
	w := store.NewWatch(cancel, s.cfg.Store.EventLog().WatchEvents(ctx, f, req.ResourceVersion))
	defer w.Stop() // until the watch goroutine has returned
	for ev := range w.C {
		if ev.Err != nil {
			return ev.Err
		}
		if err := stream.Send(ev.Object); err != nil {
			return err
		}
	}
	return nil
}

// uidPattern is what a sandbox uid looks like (a UUID, in any case).
var uidPattern = regexp.MustCompile(`^[0-9a-fA-F-]{1,64}$`)

// eventFilter validates the filters of ListEvents and WatchEvents.
func eventFilter(workspace, sandbox, uid, node string) (store.EventFilter, error) {
	if err := validWorkspace("workspace", workspace); err != nil {
		return store.EventFilter{}, err
	}
	if sandbox != "" {
		if err := validName("sandbox", sandbox); err != nil {
			return store.EventFilter{}, err
		}
		workspace = ws(workspace)
	}
	if uid != "" && !uidPattern.MatchString(uid) {
		return store.EventFilter{}, shoal.Invalid("sandbox_uid", "%q is not a sandbox uid", trunc(uid))
	}
	if node != "" {
		if err := validName("node", node); err != nil {
			return store.EventFilter{}, err
		}
	}
	return store.EventFilter{Workspace: workspace, Sandbox: sandbox, UID: uid, Node: node}, nil
}

// recordDeleteRequested records that the caller of ctx asked for sb's
// deletion, through what (a delete, a drain, a node removal).
func recordDeleteRequested(ctx context.Context, ev Events, sb *shoalv1.Sandbox, through string) {
	if ev == nil || sb == nil {
		return
	}
	by, d := requester(ctx)
	d["through"] = through
	ev.Record(sb, events.Event{Reason: events.DeleteRequested, Message: fmt.Sprintf("deletion requested by %s (%s)", by, through), Details: d})
}

// recordRunStateRequested records that the caller of ctx asked for sb's
// container to stop or start (reason StopRequested or StartRequested), as
// the request wrote it: its run generation and, for a stop, its grace.
func recordRunStateRequested(ctx context.Context, ev Events, sb *shoalv1.Sandbox, reason events.Reason) {
	if ev == nil || sb == nil {
		return
	}
	by, d := requester(ctx)
	spec := sb.GetSpec()
	d["run_generation"] = fmt.Sprint(spec.GetRunGeneration())
	msg := fmt.Sprintf("start requested by %s", by)
	if reason == events.StopRequested {
		grace := spec.GetStopGrace().AsDuration()
		d["grace"] = grace.String()
		msg = fmt.Sprintf("stop requested by %s (grace %s)", by, grace)
	}
	ev.Record(sb, events.Event{Reason: reason, Message: msg, Details: d})
}

// requester says who made the call of ctx: its certificate's subject and
// role, with the request id the audit log records it under.
func requester(ctx context.Context) (string, map[string]string) {
	by := "a client of the plaintext (loopback) API"
	d := map[string]string{}
	if id, err := identity(ctx); err == nil {
		by = fmt.Sprintf("%s (role %s)", id.Subject, id.Role)
		d["role"] = string(id.Role)
	}
	d["by"] = by
	if rid := requestIDOf(ctx); rid != "" {
		d["request_id"] = rid // the audit log's record of the call
	}
	return by, d
}
