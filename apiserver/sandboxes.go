package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

func (s *Server) CreateSandbox(ctx context.Context, req *shoalv1.CreateSandboxRequest) (*shoalv1.Sandbox, error) {
	if err := validateSandbox(req.GetSandbox()); err != nil {
		return nil, err
	}
	if err := validRequestID(req.GetRequestId()); err != nil {
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
	if err := egressOnCreate(sb.Spec); err != nil {
		return nil, err
	}
	if err := s.admit(ctx, sb.Spec); err != nil {
		return nil, err
	}
	if err := s.envFits(ctx, sb.Meta.Workspace, sb.Spec.Env, sb.Spec.Providers, "sandbox.spec.providers"); err != nil {
		return nil, err
	}
	sb.Status = &shoalv1.SandboxStatus{}
	created, err := s.cfg.Store.CreateSandboxOn(ctx, sb, store.Placement{Node: sb.Spec.Node, Selector: sb.Spec.NodeSelector}, req.RequestId)
	if err != nil || !req.Wait {
		return created, err
	}
	return s.waitProvisioned(ctx, created)
}

// admit checks a sandbox against the engine of the node that will run it,
// so that what can never start fails now with a clear error rather than
// later as an ERROR status. Only the owning node can ask its engine: the
// check is made when this node is the only one the sandbox can be placed
// on (pinned to it, or the only node that fits); elsewhere the owner's
// agent reports a missing image as ERROR. What each node's engine has
// (CPUs, memory) is in its registration, where placement checks it for
// every node. Static checks are validate.go's. An engine that cannot be
// asked right now is no reason to refuse.
func (s *Server) admit(ctx context.Context, spec *shoalv1.SandboxSpec) error {
	if s.cfg.Engine == nil {
		return nil
	}
	owner := spec.Node
	if owner == "" {
		// Advice only: a refusal is the create's to give, after its own
		// checks (a retry of a create that took the last slot must get
		// its sandbox back, a taken name ALREADY_EXISTS).
		nodes, err := s.cfg.Store.Candidates(ctx, store.Placement{Selector: spec.NodeSelector}, &shoalv1.Sandbox{Spec: spec})
		if err != nil || len(nodes) != 1 {
			return nil
		}
		owner = nodes[0]
	}
	if owner != s.cfg.Node {
		return nil
	}
	has, err := s.cfg.Engine.HasImage(ctx, spec.Image)
	switch {
	case err != nil:
		s.log.Warn("create: cannot check the image; the agent will", "image", spec.Image, "err", err)
	case !has:
		return shoal.FailedPrecondition("image %q is not present on node %s's Docker engine, and nothing is pulled from a registry; build or load it there first (the default image: `make image`)", spec.Image, s.cfg.Node)
	}
	return nil
}

// envFits refuses a sandbox whose container environment (env plus the
// credentials of its providers, as they are now) would be too large for the
// kernel to start its process, or whose providers give the same credential
// (credentialClash). A provider rotated larger later is caught by the
// agent, as ERROR. Missing providers are left to the store's own check.
func (s *Server) envFits(ctx context.Context, w string, env map[string]string, providers []string, field string) error {
	vars := maps.Clone(env)
	if vars == nil {
		vars = map[string]string{}
	}
	var provs []*shoalv1.Provider
	for _, p := range providers {
		prov, err := s.cfg.Store.GetProvider(ctx, w, p)
		if err != nil {
			continue
		}
		provs = append(provs, prov)
	}
	if err := credentialClash(field, provs); err != nil {
		return err
	}
	for _, prov := range provs {
		creds, err := s.cfg.Store.OpenCredentials(prov)
		if err != nil {
			return err // this node cannot open them: say so now
		}
		maps.Copy(vars, creds)
	}
	list := make([]string, 0, len(vars))
	for k, v := range vars {
		list = append(list, k+"="+v)
	}
	if n := shoal.EnvBytes(list); n > shoal.MaxContainerEnvBytes {
		return shoal.Invalid(field, "the container's environment would be %d bytes (env plus the credentials of its providers); at most %d fit", n, shoal.MaxContainerEnvBytes)
	}
	return nil
}

// credentialClash refuses providers (in attach order) of which two give
// the same credential: a container's environment holds one value per name,
// so the later provider's value would silently replace the earlier's.
func credentialClash(field string, provs []*shoalv1.Provider) error {
	owner := map[string]string{}
	for _, p := range provs {
		for _, k := range slices.Sorted(maps.Keys(p.GetCredentials())) {
			if o, ok := owner[k]; ok && o != p.GetMeta().GetName() {
				return shoal.FailedPrecondition("%s: providers %q and %q both give credential %q, and a container holds one value per name; remove it from one of them, or do not attach both",
					field, o, p.GetMeta().GetName(), k)
			}
			owner[k] = p.GetMeta().GetName()
		}
	}
	return nil
}

// attachedClash refuses credentials newly added to a provider when another
// provider attached to one of its live sandboxes gives them too, naming
// the sandbox: after its next start that sandbox's container would get one
// of the two values at random. Read only when keys are added.
func (s *Server) attachedClash(ctx context.Context, w, provider string, added []string) error {
	sandboxes, err := s.cfg.Store.AttachedSandboxes(ctx, w, provider)
	if err != nil {
		return err
	}
	others := map[string]*shoalv1.Provider{}
	for _, name := range sandboxes {
		sb, err := s.cfg.Store.GetSandbox(ctx, w, name)
		switch shoal.KindOf(err) {
		case shoal.KindNotFound, shoal.KindDataLoss:
			continue // gone meanwhile, or unreadable: it holds nothing
		}
		if err != nil {
			return err
		}
		for _, q := range sb.GetSpec().GetProviders() {
			if q == provider {
				continue
			}
			other, seen := others[q]
			if !seen {
				if other, err = s.cfg.Store.GetProvider(ctx, w, q); err != nil && shoal.KindOf(err) != shoal.KindNotFound && shoal.KindOf(err) != shoal.KindDataLoss {
					return err
				}
				others[q] = other
			}
			for _, k := range added {
				if _, ok := other.GetCredentials()[k]; ok {
					return shoal.FailedPrecondition("provider.credentials[%s]: sandbox %q has provider %q attached too, which gives credential %q, and a container holds one value per name; remove it from one of them, or detach one",
						k, name, q, k)
				}
			}
		}
	}
	return nil
}

// waitProvisioned follows the sandbox until it leaves PROVISIONING: READY
// once its container runs, or STOPPED, ERROR, PAUSED as the agent found it
// (a command that ends at once is STOPPED with its exit code, not READY).
func (s *Server) waitProvisioned(ctx context.Context, sb *shoalv1.Sandbox) (*shoalv1.Sandbox, error) {
	m := sb.Meta
	ctx, cancel := s.bindShutdown(ctx)
	w := store.NewWatch(cancel, s.cfg.Store.WatchSandboxes(ctx, m.Workspace, m.Name, m.ResourceVersion))
	defer w.Stop() // until the watch goroutine has returned
	for ev := range w.C {
		if ev.Err != nil {
			return nil, ev.Err
		}
		cur := ev.Object
		if cur.Meta.Uid != m.Uid || ev.Type == shoalv1.EventType_DELETED {
			return nil, shoal.NotFound("sandbox %q was deleted while it was being provisioned", m.Name)
		}
		if cur.Status.GetPhase() != shoalv1.SandboxPhase_PROVISIONING && egressApplied(cur) {
			return cur, nil
		}
	}
	if errors.Is(context.Cause(ctx), errShuttingDown) {
		return nil, shoal.Unavailable("the node shut down while sandbox %q was being provisioned; it was created: get it, or watch it", m.Name)
	}
	return nil, ctxDone(ctx, "waiting for sandbox "+m.Name+" to become READY")
}

func ctxDone(ctx context.Context, what string) error {
	if errors.Is(context.Cause(ctx), errShuttingDown) {
		return shoal.Unavailable("the node shut down while %s; what was asked is recorded and goes on: wait again through another node", what)
	}
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

// ListSandboxes sends each item as the watch cache holds it, not decoded
// and encoded again (store.ListSandboxesEncoded, SetEncoded): a
// client decodes them as the response's items; a caller in process gets
// them still encoded, and decodes the response as a client would.
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
	page, err := s.cfg.Store.ListSandboxesEncoded(ctx, ref.Workspace, o, func(sb *shoalv1.Sandbox) bool {
		return sel.matches(sb.GetMeta().GetLabels())
	})
	if err != nil {
		return nil, err
	}
	next, err := s.tokens.encode(ctx, ref, page.Next)
	if err != nil {
		return nil, err
	}
	resp := &shoalv1.ListSandboxesResponse{NextPageToken: next, ResourceVersion: page.Revision, Warnings: page.Warnings}
	SetEncoded(resp, "items", page.Items)
	return resp, nil
}

// SetEncoded puts a list's items, encoded, into its response, as its
// repeated message field named field: as the response's unrecognized
// fields, which a marshal copies as they are, each an occurrence of that
// field, so that whoever decodes the response gets them as its items.
// The field itself stays empty. shoal.v1's lists and the front ends'
// (package openshellapi) send the watch cache's bytes through it.
func SetEncoded(resp proto.Message, field protoreflect.Name, items [][]byte) {
	m := resp.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(field)
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		panic(fmt.Sprintf("apiserver: %s has no repeated message field %s", m.Descriptor().FullName(), field))
	}
	num := fd.Number()
	size := 0
	for _, it := range items {
		size += protowire.SizeTag(num) + protowire.SizeBytes(len(it))
	}
	b := make([]byte, 0, size)
	for _, it := range items {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, it)
	}
	m.SetUnknown(b)
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
	eg, err := egressChangeOf(req)
	if err != nil {
		return nil, err
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
			if !eg.empty() {
				return eg.apply(sb)
			}
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
	recordDeleteRequested(ctx, s.cfg.Events, sb, "sandbox delete")
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
	ctx, cancel := s.bindShutdown(ctx)
	w := store.NewWatch(cancel, s.cfg.Store.WatchSandboxes(ctx, m.Workspace, m.Name, m.ResourceVersion))
	defer w.Stop() // until the watch goroutine has returned
	for ev := range w.C {
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
	release, err := s.watches.acquire()
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(stream.Context())
	w := store.NewWatch(cancel, s.cfg.Store.WatchSandboxes(ctx, ws(req.Workspace), req.Name, req.ResourceVersion))
	defer w.Stop() // until the watch goroutine has returned
	for ev := range w.C {
		if ev.Err != nil {
			return ev.Err
		}
		if err := stream.Send(&shoalv1.WatchEvent{Type: ev.Type, Sandbox: ev.Object, ResourceVersion: ev.Revision}); err != nil {
			return err
		}
	}
	return nil
}

// runningContainer is the container of a sandbox for exec (running: only a
// READY sandbox's process can run more) or logs (any container).
// container finds the container of a sandbox: on this node (its id), or on
// another node (how to call that node).
func (s *Server) container(ctx context.Context, w, name string, running bool) (string, *ownerCall, error) {
	sb, err := s.cfg.Store.GetSandbox(ctx, ws(w), name)
	if err != nil {
		return "", nil, err
	}
	remote, err := s.owner(ctx, sb)
	if err != nil || remote != nil {
		return "", remote, err
	}
	id, err := s.runningContainer(sb, running)
	return id, nil, err
}

func (s *Server) runningContainer(sb *shoalv1.Sandbox, running bool) (string, error) {
	name := sb.GetMeta().GetName()
	if s.cfg.Runtime == nil {
		return "", shoal.Unavailable("this node has no container runtime")
	}
	if sb.Meta.DeletionTimestamp != nil {
		return "", shoal.FailedPrecondition("sandbox %q is being deleted", name)
	}
	for _, c := range sb.Status.GetConditions() {
		if c.Type == store.ConditionEngineReachable && c.Status == "False" {
			return "", shoal.Unavailable("sandbox %q: %s", name, c.Message)
		}
	}
	id := sb.Status.GetContainerId()
	if id == "" {
		return "", shoal.FailedPrecondition("sandbox %q has no container yet (phase %s); wait until it is READY", name, sb.Status.GetPhase())
	}
	if running {
		switch ph := sb.Status.GetPhase(); ph {
		case shoalv1.SandboxPhase_STOPPED, shoalv1.SandboxPhase_STOPPING:
			return "", shoal.FailedPrecondition("sandbox %q is %s, so nothing can run in it: %s; start it with `shoal sandbox start %s`", name, ph, sb.Status.GetMessage(), name)
		case shoalv1.SandboxPhase_PAUSED, shoalv1.SandboxPhase_ERROR, shoalv1.SandboxPhase_STARTING:
			return "", shoal.FailedPrecondition("sandbox %q is %s, so nothing can run in it: %s", name, ph, sb.Status.GetMessage())
		}
	}
	return id, nil
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
	if err := validTailLines(req.TailLines); err != nil {
		return err
	}
	ctx := stream.Context()
	id, remote, err := s.container(ctx, req.Workspace, req.Name, false)
	if err != nil {
		return err
	}
	if req.Follow {
		// A follow lasts as long as its client; a plain read ends with
		// the log, so only follows count against the cap.
		release, err := s.execs.acquire()
		if err != nil {
			return err
		}
		defer release()
	}
	if remote != nil {
		fwd, err := remote.client.Logs(remote.ctx, req)
		if err != nil {
			return err
		}
		return relay(remote, s.cfg.Node, "log stream", fwd, stream.Send)
	}
	send := func(c *shoalv1.LogsChunk) error { return stream.Send(c) }
	return s.cfg.Runtime.Logs(ctx, id, req.Follow, int(req.TailLines),
		&chunkWriter[*shoalv1.LogsChunk]{send: send, wrap: logsChunk("stdout")},
		&chunkWriter[*shoalv1.LogsChunk]{send: send, wrap: logsChunk("stderr")})
}

func (s *Server) AttachProvider(ctx context.Context, req *shoalv1.AttachProviderRequest) (*shoalv1.Sandbox, error) {
	sb, _, err := s.Attach(ctx, req)
	return sb, err
}

// Attach is AttachProvider that also says whether the provider was newly
// attached: false when it was attached already (nothing is written). For
// front ends that report it (package openshellapi).
func (s *Server) Attach(ctx context.Context, req *shoalv1.AttachProviderRequest) (*shoalv1.Sandbox, bool, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, false, err
	}
	if err := validName("provider", req.Provider); err != nil {
		return nil, false, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, false, err
	}
	sb, err := s.cfg.Store.GetSandbox(ctx, ws(req.Workspace), req.Name)
	if err != nil {
		return nil, false, err
	}
	if err := s.envFits(ctx, ws(req.Workspace), sb.GetSpec().GetEnv(), append(slices.Clone(sb.GetSpec().GetProviders()), req.Provider), "provider"); err != nil {
		return nil, false, err
	}
	return s.cfg.Store.AttachProvider(ctx, ws(req.Workspace), req.Name, req.Provider, store.Preconditions{ResourceVersion: req.ResourceVersion})
}

// DetachProvider of a provider that is not attached is FAILED_PRECONDITION.
func (s *Server) DetachProvider(ctx context.Context, req *shoalv1.DetachProviderRequest) (*shoalv1.Sandbox, error) {
	sb, detached, err := s.Detach(ctx, req)
	if err == nil && !detached {
		return nil, shoal.FailedPrecondition("provider %q is not attached to sandbox %q", req.Provider, req.Name)
	}
	return sb, err
}

// Detach is DetachProvider that answers a provider that is not attached
// with detached false and the sandbox as it is, instead of an error. For
// front ends whose detach is a no-op then (package openshellapi).
func (s *Server) Detach(ctx context.Context, req *shoalv1.DetachProviderRequest) (*shoalv1.Sandbox, bool, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, false, err
	}
	if err := validName("provider", req.Provider); err != nil {
		return nil, false, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, false, err
	}
	return s.cfg.Store.DetachProvider(ctx, ws(req.Workspace), req.Name, req.Provider, store.Preconditions{ResourceVersion: req.ResourceVersion})
}

var _ io.Writer = (*chunkWriter[*shoalv1.ExecChunk])(nil)
