package openshellapi

import (
	"cmp"
	"context"
	"math"
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

// sandboxPage gathers the page of sandbox records given to its add
// (limit and offset as page's), ordered by what their index says, and
// encodes only the page's records (or reuses their encodings).
type sandboxPage struct {
	lo    int
	least least[keyedRecord]
}

type keyedRecord struct {
	ms  int64 // created_at in ms, the first key of the order
	rec store.Record[*shoalv1.Sandbox]
}

func newSandboxPage(limit, offset uint32) *sandboxPage {
	lo, hi := window(math.MaxInt, limit, offset)
	return &sandboxPage{lo: lo, least: least[keyedRecord]{k: hi, c: func(a, b keyedRecord) int {
		if a.ms != b.ms {
			return cmp.Compare(a.ms, b.ms)
		}
		return order(a.ms, a.rec.Workspace(), a.rec.Name(), b.ms, b.rec.Workspace(), b.rec.Name())
	}}}
}

func (p *sandboxPage) add(r store.Record[*shoalv1.Sandbox]) {
	p.least.add(keyedRecord{r.CreatedAt().UnixMilli(), r})
}

// encoded is the page's sandboxes, encoded.
func (p *sandboxPage) encoded() ([][]byte, error) {
	sorted := p.least.sorted()
	if p.lo >= len(sorted) {
		return nil, nil
	}
	out := make([][]byte, 0, len(sorted)-p.lo)
	size := 0
	for i, k := range sorted[p.lo:] {
		b, err := k.rec.Derived(sandboxEncoding, encodeSandbox)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "sandbox %q in workspace %q: %v", k.rec.Name(), k.rec.Workspace(), err)
		}
		// OpenShell's list has no page token to end a page early by
		// size, and a page cut short would read as the list's end: one
		// that would not fit a response is refused, saying what fits.
		if size += len(b) + 8; size > maxPageBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "limit: the first %d of these sandboxes already fill a response (%d MiB); ask for at most %d at a time", i, maxPageBytes>>20, max(i, 1))
		}
		out = append(out, b)
	}
	return out, nil
}

// maxPageBytes is the most a list answers: what a gRPC client receives by
// default (4 MiB: OpenShell's clients keep it) less room for the framing.
const maxPageBytes = 4<<20 - 64<<10

// least keeps the k least of the items added by c: a page of offset+limit
// items of a long list. Once it holds k it makes them a max-heap, so that
// an item that is not among them costs one comparison and is not kept,
// where sorting the whole list would keep all and cost about log₂ n
// comparisons each. Until then (and for a page that reaches the list's
// end) it only appends: the sort at the end is all the work.
type least[E any] struct {
	k    int
	c    func(a, b E) int
	h    []E
	heap bool
}

func (l *least[E]) add(e E) {
	if len(l.h) < l.k {
		l.h = append(l.h, e)
		return
	}
	if l.k == 0 {
		return
	}
	if !l.heap {
		for i := len(l.h)/2 - 1; i >= 0; i-- {
			l.down(i)
		}
		l.heap = true
	}
	if l.c(e, l.h[0]) < 0 {
		l.h[0] = e
		l.down(0)
	}
}

// down sifts h[i] down the max-heap.
func (l *least[E]) down(i int) {
	h := l.h
	for {
		big := 2*i + 1
		if big >= len(h) {
			return
		}
		if r := big + 1; r < len(h) && l.c(h[r], h[big]) > 0 {
			big = r
		}
		if l.c(h[big], h[i]) <= 0 {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

// sorted is the items kept, least first (the heap is spent).
func (l *least[E]) sorted() []E {
	slices.SortFunc(l.h, l.c)
	return l.h
}
