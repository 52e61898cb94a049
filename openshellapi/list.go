package openshellapi

import (
	"cmp"
	"context"
	"slices"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// OpenShell's lists page by limit and offset over the whole list, oldest
// first. shoal reads the whole (workspace's) list at one revision, as one
// page of its own list (one read), and cuts the page out of it.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// scope is the workspace a list reads: "" for every workspace, which only
// an admin may list, and not together with a workspace.
func (s *Server) scope(ctx context.Context, workspace string, all bool) (string, error) {
	if !all {
		return ws(workspace), nil
	}
	if workspace != "" {
		return "", shoal.Invalid("all_workspaces", "lists every workspace; it cannot be given with workspace %q", workspace)
	}
	ok, err := s.admin(ctx)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", shoal.PermissionDenied("all_workspaces is for admins: list one workspace at a time")
	}
	return "", nil
}

// page sorts shoal's items by creation time (to the millisecond, as
// OpenShell's created_at_ms), then workspace and name, and returns the
// limit (0: DefaultListLimit, at most MaxListLimit) items from offset,
// converted: only the page's items are converted.
func page[T interface{ GetMeta() *shoalv1.ObjectMeta }, O any](items []T, convert func(T) O, limit, offset uint32) []O {
	slices.SortStableFunc(items, func(a, b T) int {
		ma, mb := a.GetMeta(), b.GetMeta()
		return cmp.Or(cmp.Compare(millis(ma.GetCreatedAt()), millis(mb.GetCreatedAt())),
			cmp.Compare(ws(ma.GetWorkspace()), ws(mb.GetWorkspace())), cmp.Compare(ma.GetName(), mb.GetName()))
	})
	n := int(limit)
	if n == 0 {
		n = DefaultListLimit
	}
	n = min(n, MaxListLimit)
	if int(offset) >= len(items) {
		return nil
	}
	items = items[offset:min(len(items), int(offset)+n)]
	out := make([]O, len(items))
	for i, it := range items {
		out[i] = convert(it)
	}
	return out
}
