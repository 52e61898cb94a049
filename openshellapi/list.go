package openshellapi

import (
	"cmp"
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// OpenShell's lists page by limit and offset over the whole list, oldest
// first. shoal reads the whole (workspace's) list at one revision, as one
// page of its own list (one read), and cuts the page out of it. A sandbox
// list does so without decoding the list (store.Record: the watch cache's
// index holds the creation time), and sends the page's sandboxes in the
// OpenShell encoding the cache keeps for each record.
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

// order is OpenShell's list order: creation time (to the millisecond, as
// OpenShell's created_at_ms), then workspace, then name.
func order(aMs int64, aWs, aName string, bMs int64, bWs, bName string) int {
	if c := cmp.Compare(aMs, bMs); c != 0 {
		return c // most comparisons end here: compare no string
	}
	return cmp.Or(cmp.Compare(ws(aWs), ws(bWs)), cmp.Compare(aName, bName))
}

// window is where the page of limit (0: DefaultListLimit, at most
// MaxListLimit) items from offset lies in a sorted list of n: [lo, hi),
// empty past the end.
func window(n int, limit, offset uint32) (lo, hi int) {
	size := int(limit)
	if size == 0 {
		size = DefaultListLimit
	}
	size = min(size, MaxListLimit)
	lo = min(int(offset), n)
	return lo, min(n, lo+size)
}

// page sorts shoal's items in list order and returns the page's items
// converted: only the page's items are converted.
func page[T interface{ GetMeta() *shoalv1.ObjectMeta }, O any](items []T, convert func(T) O, limit, offset uint32) []O {
	slices.SortStableFunc(items, func(a, b T) int {
		ma, mb := a.GetMeta(), b.GetMeta()
		return order(millis(ma.GetCreatedAt()), ma.GetWorkspace(), ma.GetName(), millis(mb.GetCreatedAt()), mb.GetWorkspace(), mb.GetName())
	})
	lo, hi := window(len(items), limit, offset)
	out := make([]O, 0, hi-lo)
	for _, it := range items[lo:hi] {
		out = append(out, convert(it))
	}
	return out
}

// sandboxEncoding is the OpenShell encoding of a sandbox (sandboxOf,
// marshalled) that the watch cache keeps beside each record once a list
// has sent it (store.Record.Derived): a list sent again encodes only the
// records that changed. A sandbox record holds no credential, and
// sandboxOf copies only its meta, spec and status.
var sandboxEncoding = store.NewDerivation("openshell.v1.Sandbox")

var wire = proto.MarshalOptions{Deterministic: true}

func encodeSandbox(sb *shoalv1.Sandbox) ([]byte, error) { return wire.Marshal(sandboxOf(sb)) }

// sandboxPage is page for sandbox records: sorted by what their index
// says, and only the page's records encoded (or their encodings reused).
func sandboxPage(recs []store.Record[*shoalv1.Sandbox], limit, offset uint32) ([][]byte, error) {
	type keyed struct {
		ms  int64
		rec *store.Record[*shoalv1.Sandbox]
	}
	sorted := make([]keyed, len(recs))
	for i := range recs {
		sorted[i] = keyed{recs[i].CreatedAt().UnixMilli(), &recs[i]}
	}
	lo, hi := window(len(sorted), limit, offset)
	sorted = first(sorted, hi, func(a, b keyed) int {
		if a.ms != b.ms {
			return cmp.Compare(a.ms, b.ms)
		}
		return order(a.ms, a.rec.Workspace(), a.rec.Name(), b.ms, b.rec.Workspace(), b.rec.Name())
	})
	out := make([][]byte, 0, hi-lo)
	for _, k := range sorted[lo:hi] {
		b, err := k.rec.Derived(sandboxEncoding, encodeSandbox)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "sandbox %q in workspace %q: %v", k.rec.Name(), k.rec.Workspace(), err)
		}
		out = append(out, b)
	}
	return out, nil
}

// first returns the k least of items by c, sorted (reordering items). For
// a page near the start of a long list it keeps the k least seen so far
// in a max-heap: an item that is not among them costs one comparison,
// where sorting the whole list costs about log₂ n each.
func first[E any](items []E, k int, c func(a, b E) int) []E {
	if k >= len(items) {
		slices.SortFunc(items, c)
		return items
	}
	h := items[:k]
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= k {
				return
			}
			if r := l + 1; r < k && c(h[r], h[l]) > 0 {
				l = r
			}
			if c(h[l], h[i]) <= 0 {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := k; i < len(items) && k > 0; i++ {
		if c(items[i], h[0]) < 0 {
			h[0], items[i] = items[i], h[0]
			down(0)
		}
	}
	slices.SortFunc(h, c)
	return h
}
