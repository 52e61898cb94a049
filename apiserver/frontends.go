package apiserver

import (
	"context"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Front ends served beside shoal.v1 on the node's gRPC server (package
// openshellapi) call the Server in process: its shoal.v1 methods, Attach and
// Detach (sandboxes.go), Caller (authz.go), and the whole lists below, for
// APIs that page by offset rather than by token. Their calls pass this
// Server's interceptors under their own method names, authorized as their
// twins (Config.Twins).

// EachSandboxRecord lists the sandboxes of a workspace ("": every
// workspace) whose labels match selector (ListSandboxesRequest's syntax),
// calling each with each one, not decoded (store.Record), in key order, at
// one revision: one read, from the watch cache where there is one, as one
// page of ListSandboxes is. The caller orders them, decodes the ones it
// returns and sends them encoded (SetEncoded).
func (s *Server) EachSandboxRecord(ctx context.Context, workspace, selector string, each func(store.Record[*shoalv1.Sandbox])) error {
	if err := validWorkspace("workspace", workspace); err != nil {
		return err
	}
	sel, err := parseSelector(selector)
	if err != nil {
		return err
	}
	var keep func(*shoalv1.Sandbox) bool // no selector: no record's labels are read
	if len(sel) > 0 {
		keep = func(sb *shoalv1.Sandbox) bool { return sel.matches(sb.GetMeta().GetLabels()) }
	}
	_, err = s.cfg.Store.EachSandboxRecord(ctx, workspace, keep, each)
	return err
}

// ListAllProviders lists the providers of a workspace ("": every
// workspace), credentials redacted, in key order, at one revision.
func (s *Server) ListAllProviders(ctx context.Context, workspace string) ([]*shoalv1.Provider, error) {
	if err := validWorkspace("workspace", workspace); err != nil {
		return nil, err
	}
	page, err := s.cfg.Store.ListProviders(ctx, workspace, store.ListOptions{}, nil)
	if err != nil {
		return nil, err
	}
	out := make([]*shoalv1.Provider, len(page.Items))
	for i, p := range page.Items {
		out[i] = redact(p)
	}
	return out, nil
}
