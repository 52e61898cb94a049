package chaos

import (
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Op is one recorded client operation.
type Op struct {
	Scenario string `json:"scenario"`
	Client   int    `json:"client"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Arg      string `json:"arg,omitempty"`
	// Call and Return are nanoseconds since the run started.
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Code   string `json:"code"`
	Err    string `json:"err,omitempty"`
	// Output of reads and creates.
	Exists   bool `json:"exists,omitempty"`
	Deleting bool `json:"deleting,omitempty"`
	// Stopped: a get's spec.run_state is RUN_STATE_STOPPED.
	Stopped bool `json:"stopped,omitempty"`
	// Writes: a get's writer keys, canonical (see writes.go).
	Writes string `json:"writes,omitempty"`
	UID    string `json:"uid,omitempty"`

	Precondition bool `json:"precondition,omitempty"`
	Lifecycle    bool `json:"lifecycle,omitempty"`
	DuringFault  bool `json:"during_fault,omitempty"`

	// Egress is the egress scenario's part of its ops (egress.go).
	Egress *EgressOp `json:"egress,omitempty"`
}

// ambiguous reports whether the op may or may not have taken effect.
func (o Op) ambiguous() bool { return ambiguousCode(o.Code) }

// ambiguousCode: the outcome of an op that ended with this code is unknown.
func ambiguousCode(code string) bool {
	switch code {
	case codes.Unavailable.String(), codes.DeadlineExceeded.String(), codes.Canceled.String(), codes.Internal.String(), codes.Unknown.String():
		return true
	}
	return false
}

func (o Op) ok() bool { return o.Code == codes.OK.String() }

// history records ops from many clients.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	// faultActive counts faults in effect; ops called meanwhile are marked.
	faultActive int
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *history) setFault(delta int) {
	h.mu.Lock()
	h.faultActive += delta
	h.mu.Unlock()
}

// begin starts an op; finish records it with the call's error.
func (h *history) begin(scn string, client int, kind, name string) *Op {
	h.mu.Lock()
	during := h.faultActive > 0
	h.mu.Unlock()
	return &Op{Scenario: scn, Client: client, Kind: kind, Name: name, Call: h.now(), DuringFault: during}
}

func (h *history) finish(op *Op, err error) {
	op.Return = h.now()
	op.Code = status.Code(err).String()
	if err != nil {
		op.Err = status.Convert(err).Message()
	}
	h.mu.Lock()
	h.ops = append(h.ops, *op)
	h.mu.Unlock()
}

// system records an act of the system's that a fault caused (not a
// client's call): its kind on the named sandboxes ("workspace/name" or
// name), called at call, answered OK now.
func (h *history) system(scn, kind string, call int64, names []string) {
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		if _, name, ok := strings.Cut(n, "/"); ok {
			n = name
		}
		if !strings.HasPrefix(n, scn+"-") {
			// Another scenario's sandbox: its history is checked with
			// that scenario's, which has ended.
			continue
		}
		h.ops = append(h.ops, Op{Scenario: scn, Client: systemClient, Kind: kind, Name: n, Call: call, Return: ret, Code: codes.OK.String(), DuringFault: true})
	}
}

// systemClient is the client id of the system's acts in a history.
const systemClient = 1 << 20

func (h *history) snapshot() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}
