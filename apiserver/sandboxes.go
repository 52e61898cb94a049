package apiserver

import (
	"context"
	"io"

	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

func (s *Server) CreateSandbox(ctx context.Context, req *shoalv1.CreateSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateSandbox(req.GetSandbox()); err != nil {
		return nil, err
	}
	sb := proto.Clone(req.Sandbox).(*shoalv1.Sandbox)
	sb.Meta.Workspace = ws(sb.Meta.Workspace)
	if sb.Spec == nil {
		sb.Spec = &shoalv1.SandboxSpec{}
	}
	if sb.Spec.Image == "" {
		sb.Spec.Image = s.cfg.DefaultImage
	}
	sb.Status = &shoalv1.SandboxStatus{Node: s.cfg.Node}
	created, err := s.cfg.Store.CreateSandbox(ctx, sb)
	if err != nil || !req.Wait {
		return created, err
	}
	return s.waitProvisioned(ctx, created)
}

// waitProvisioned follows the sandbox until it leaves PROVISIONING.
func (s *Server) waitProvisioned(ctx context.Context, sb *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
	m := sb.Meta
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ev := range s.cfg.Store.WatchSandboxes(ctx, m.Workspace, m.Name, m.ResourceVersion) {
		if ev.Err != nil {
			return nil, ev.Err
		}
		cur := ev.Object
		if cur.Meta.Uid != m.Uid || ev.Type == shoalv1.EventType_DELETED {
			return nil, shoal.NotFound("sandbox %q was deleted while it was being provisioned", m.Name)
		}
		if cur.Status.GetPhase() != shoalv1.SandboxPhase_PROVISIONING {
			return cur, nil
		}
	}
	return nil, ctxDone(ctx, "waiting for sandbox "+m.Name+" to become READY")
}

func ctxDone(ctx context.Context, what string) error {
	if ctx.Err() == context.DeadlineExceeded {
		return shoal.Unavailable("timed out %s", what)
	}
	return ctx.Err()
}

func (s *Server) GetSandbox(ctx context.Context, req *shoalv1.GetSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	return s.cfg.Store.GetSandbox(ctx, ws(req.Workspace), req.Name)
}

func (s *Server) ListSandboxes(ctx context.Context, req *shoalv1.ListSandboxesRequest) (*shoalv1.ListSandboxesResponse, error) {
	if err := validWorkspace("workspace", req.Workspace); err != nil {
		return nil, err
	}
	if err := validPageSize(req.PageSize); err != nil {
		return nil, err
	}
	sel, err := parseSelector(req.LabelSelector)
	if err != nil {
		return nil, err
	}
	ref := listRef{Kind: "sandboxes", Workspace: ws(req.Workspace), Selector: req.LabelSelector}
	o, err := s.tokens.decode(ctx, req.PageToken, ref, listOptions(req.PageSize))
	if err != nil {
		return nil, err
	}
	page, err := s.cfg.Store.ListSandboxes(ctx, ref.Workspace, o, func(sb *shoalv1.Sandbox) bool {
		return sel.matches(sb.GetMeta().GetLabels())
	})
	if err != nil {
		return nil, err
	}
	next, err := s.tokens.encode(ctx, ref, page.Next)
	if err != nil {
		return nil, err
	}
	return &shoalv1.ListSandboxesResponse{Items: page.Items, NextPageToken: next, ResourceVersion: page.Revision, Warnings: page.Warnings}, nil
}

func (s *Server) UpdateSandbox(ctx context.Context, req *shoalv1.UpdateSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, err
	}
	if err := validLabels("set_labels", req.SetLabels); err != nil {
		return nil, err
	}
	for _, k := range req.RemoveLabels {
		if err := validLabelKey("remove_labels", k); err != nil {
			return nil, err
		}
	}
	if err := validAnnotations("set_annotations", req.SetAnnotations); err != nil {
		return nil, err
	}
	for _, k := range req.RemoveAnnotations {
		if err := validLabelKey("remove_annotations", k); err != nil {
			return nil, err
		}
	}
	return s.cfg.Store.UpdateSandbox(ctx, ws(req.Workspace), req.Name, store.Preconditions{ResourceVersion: req.ResourceVersion},
		func(sb *shoalv1.Sandbox) error {
			labels, ann := copyMap(sb.Meta.Labels), copyMap(sb.Meta.Annotations)
			for k, v := range req.SetLabels {
				labels[k] = v
			}
			for _, k := range req.RemoveLabels {
				delete(labels, k)
			}
			for k, v := range req.SetAnnotations {
				ann[k] = v
			}
			for _, k := range req.RemoveAnnotations {
				delete(ann, k)
			}
			if err := validLabels("set_labels", labels); err != nil {
				return err
			}
			if err := validAnnotations("set_annotations", ann); err != nil {
				return err
			}
			sb.Meta.Labels, sb.Meta.Annotations = labels, ann
			return nil
		})
}

// DeleteSandbox records the deletion intent. It succeeds whatever other
// writers do; only the caller's preconditions can make it fail. With wait
// it returns when the record is gone.
func (s *Server) DeleteSandbox(ctx context.Context, req *shoalv1.DeleteSandboxRequest) (*shoalv1.DeleteSandboxResponse, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	pre := store.Preconditions{UID: req.GetPreconditions().GetUid(), ResourceVersion: req.GetPreconditions().GetResourceVersion()}
	if err := validVersion("preconditions.resource_version", pre.ResourceVersion); err != nil {
		return nil, err
	}
	sb, err := s.cfg.Store.MarkSandboxDeleting(ctx, ws(req.Workspace), req.Name, pre)
	if err != nil {
		return nil, err
	}
	if !req.Wait {
		return &shoalv1.DeleteSandboxResponse{Sandbox: sb}, nil
	}
	if err := s.waitGone(ctx, sb); err != nil {
		return nil, err
	}
	return &shoalv1.DeleteSandboxResponse{}, nil
}

// waitGone follows the sandbox's key from the revision it was marked at
// until that uid's record is deleted.
func (s *Server) waitGone(ctx context.Context, sb *shoalv1.Sandbox) error {
	m := sb.Meta
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ev := range s.cfg.Store.WatchSandboxes(ctx, m.Workspace, m.Name, m.ResourceVersion) {
		if ev.Err != nil {
			return ev.Err
		}
		if ev.Type == shoalv1.EventType_DELETED || ev.Object.Meta.Uid != m.Uid {
			return nil
		}
	}
	return ctxDone(ctx, "waiting for sandbox "+m.Name+" to be removed")
}

func (s *Server) WatchSandboxes(req *shoalv1.WatchSandboxesRequest, stream shoalv1.Shoal_WatchSandboxesServer) error {
	if err := validWorkspace("workspace", req.Workspace); err != nil {
		return err
	}
	if req.Name != "" {
		if err := validName("name", req.Name); err != nil {
			return err
		}
	}
	if req.ResourceVersion < 0 {
		return shoal.Invalid("resource_version", "must not be negative")
	}
	ctx := stream.Context()
	for ev := range s.cfg.Store.WatchSandboxes(ctx, ws(req.Workspace), req.Name, req.ResourceVersion) {
		if ev.Err != nil {
			return ev.Err
		}
		if err := stream.Send(&shoalv1.WatchEvent{Type: ev.Type, Sandbox: ev.Object, ResourceVersion: ev.Revision}); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) runningContainer(ctx context.Context, w, name string) (string, error) {
	if s.cfg.Runtime == nil {
		return "", shoal.Unavailable("this node has no container runtime")
	}
	sb, err := s.cfg.Store.GetSandbox(ctx, ws(w), name)
	if err != nil {
		return "", err
	}
	if sb.Meta.DeletionTimestamp != nil {
		return "", shoal.FailedPrecondition("sandbox %q is being deleted", name)
	}
	id := sb.Status.GetContainerId()
	if id == "" {
		return "", shoal.FailedPrecondition("sandbox %q has no container yet (phase %s); wait until it is READY", name, sb.Status.GetPhase())
	}
	return id, nil
}

func (s *Server) Exec(req *shoalv1.ExecRequest, stream shoalv1.Shoal_ExecServer) error {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return err
	}
	if len(req.Command) == 0 {
		return shoal.Invalid("command", "is required")
	}
	if len(req.Command) > MaxCommandArgs {
		return shoal.Invalid("command", "%d arguments; at most %d are allowed", len(req.Command), MaxCommandArgs)
	}
	ctx := stream.Context()
	id, err := s.runningContainer(ctx, req.Workspace, req.Name)
	if err != nil {
		return err
	}
	send := func(c *shoalv1.ExecChunk) error { return stream.Send(c) }
	code, err := s.cfg.Runtime.Exec(ctx, id, req.Command, req.Stdin,
		&chunkWriter[*shoalv1.ExecChunk]{send: send, wrap: execChunk("stdout")},
		&chunkWriter[*shoalv1.ExecChunk]{send: send, wrap: execChunk("stderr")})
	if err != nil {
		return err
	}
	return stream.Send(&shoalv1.ExecChunk{Exited: true, ExitCode: int32(code)})
}

func execChunk(name string) func([]byte) *shoalv1.ExecChunk {
	return func(b []byte) *shoalv1.ExecChunk { return &shoalv1.ExecChunk{Data: b, Stream: name} }
}

func logsChunk(name string) func([]byte) *shoalv1.LogsChunk {
	return func(b []byte) *shoalv1.LogsChunk { return &shoalv1.LogsChunk{Data: b, Stream: name} }
}

// MaxChunk bounds the data of one streamed output message.
const MaxChunk = 64 << 10

// chunkWriter sends what is written to it as stream messages of at most
// MaxChunk bytes each.
type chunkWriter[M any] struct {
	send func(M) error
	wrap func([]byte) M
}

func (w *chunkWriter[M]) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += MaxChunk {
		b := p[off:min(len(p), off+MaxChunk)]
		if err := w.send(w.wrap(append([]byte(nil), b...))); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (s *Server) Logs(req *shoalv1.LogsRequest, stream shoalv1.Shoal_LogsServer) error {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return err
	}
	if req.TailLines < 0 {
		return shoal.Invalid("tail_lines", "must not be negative")
	}
	ctx := stream.Context()
	id, err := s.runningContainer(ctx, req.Workspace, req.Name)
	if err != nil {
		return err
	}
	send := func(c *shoalv1.LogsChunk) error { return stream.Send(c) }
	return s.cfg.Runtime.Logs(ctx, id, req.Follow, int(req.TailLines),
		&chunkWriter[*shoalv1.LogsChunk]{send: send, wrap: logsChunk("stdout")},
		&chunkWriter[*shoalv1.LogsChunk]{send: send, wrap: logsChunk("stderr")})
}

func (s *Server) AttachProvider(ctx context.Context, req *shoalv1.AttachProviderRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	if err := validName("provider", req.Provider); err != nil {
		return nil, err
	}
	return s.cfg.Store.AttachProvider(ctx, ws(req.Workspace), req.Name, req.Provider)
}

func (s *Server) DetachProvider(ctx context.Context, req *shoalv1.DetachProviderRequest) (*shoalv1.Sandbox, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	if err := validName("provider", req.Provider); err != nil {
		return nil, err
	}
	return s.cfg.Store.DetachProvider(ctx, ws(req.Workspace), req.Name, req.Provider)
}

var _ io.Writer = (*chunkWriter[*shoalv1.ExecChunk])(nil)
