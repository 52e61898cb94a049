package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Invariant 9, fencing of cut-off hosts: from the moment a node's lease
// expires, none of its sandbox containers runs unpaused for longer than the
// fence margin, unless the node holds a lease again. It is what makes the
// leader's fenced deletion safe (store/deletion.go): once lost/<node> is a
// margin old, a deletion completes without the node, and the node's copy of
// the sandbox, with its credentials, must not be running any more.
//
// What can be checked, and what this checks. Only a node whose process
// runs can pause anything: a SIGKILLed node's containers run on until it
// returns, and a graceful stop leaves them running on purpose (as kubelet
// does); both also end the lease (a graceful stop revokes it at once), so a
// lease expiry alone does not say the node should have frozen. The caller
// therefore says when each node's process ran (Window: from its start or
// SIGCONT to its SIGKILL, SIGSTOP or SIGTERM), and the fence clock of an
// expiry starts at the later of the expiry and the start of the window the
// process is in: a node stopped (SIGSTOP) across its expiry must freeze
// within the margin of being resumed, a node restarted without its lease
// within the margin of its start. Within a window, from clock + margin
// until the node registers again, any sample of the node's own engine that
// shows one of its containers running is a violation.
//
// Times: an expiry is the moment the KeyspaceWatch (on a client no fault
// touches) was handed the registry key's deletion, a little after etcd
// expired the lease; a sample counts from the start of its list call (the
// state it returned held at some instant after that). A re-registration is
// delivered a little after the node, which thaws once it holds its lease,
// made it: samples within Slack before the delivery are not held against
// it.

// DefaultFenceSlack is FencingInput.Slack's default.
const DefaultFenceSlack = 500 * time.Millisecond

// Window is a stretch in which a node's process ran: from its start (or
// SIGCONT) to its SIGKILL, SIGSTOP or graceful stop (zero To: it still
// ran at the end).
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// FencingInput is what the fencing check needs.
type FencingInput struct {
	// Registry is KeyspaceWatch.Registry().
	Registry map[string][]RegEvent
	// Samples is EngineSampler.Timeline().
	Samples map[string][]NodeSample
	// Alive says when each node's process ran; a node without an entry ran
	// throughout.
	Alive map[string][]Window
	// Margin is the nodes' --fence-margin.
	Margin time.Duration
	// Slack (default DefaultFenceSlack) is how long before a
	// re-registration's delivery a running container is tolerated.
	Slack time.Duration
	// End closes what is still open (default: now).
	End time.Time
}

// FenceEpisode is one stretch in which a node's process ran while its
// lease was gone.
type FenceEpisode struct {
	Node    string    `json:"node"`
	Expired time.Time `json:"expired"`
	// From is when the fence clock started: Expired, or the start of the
	// process's window if that was later.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Ended says what ended it: "registered again", "process stopped" or
	// "end of run".
	Ended string `json:"ended"`
	// Containers is the node's containers (running or paused) in the
	// first sample of the episode.
	Containers int `json:"containers"`
	// Frozen: a sample showed none of them running; FrozenAfter is from
	// From to the end of that sample's list call (an upper bound, within
	// one sample interval).
	Frozen      bool          `json:"frozen"`
	FrozenAfter time.Duration `json:"frozen_after_ns"`
	// Late counts the samples past From + margin that showed a container
	// of the node running.
	Late int `json:"late_samples"`
}

// FencingFigures are the fencing check's figures for the report.
type FencingFigures struct {
	Episodes []FenceEpisode `json:"episodes"`
	// Worst is the longest FrozenAfter of an episode whose node had
	// containers, on WorstNode: the measured fence time, lease expiry →
	// all of the node's containers paused.
	Worst     time.Duration `json:"worst_fence_ns"`
	WorstNode string        `json:"worst_fence_node,omitempty"`
	// NotFrozen counts episodes with containers that ended before a sample
	// showed them all paused (the node came back, or was stopped, first).
	NotFrozen int `json:"not_frozen"`
}

// CheckCutOffFencing checks invariant 9 over what the samplers recorded.
func CheckCutOffFencing(scn string, in FencingInput) ([]Violation, FencingFigures) {
	if in.Slack == 0 {
		in.Slack = DefaultFenceSlack
	}
	if in.End.IsZero() {
		in.End = time.Now()
	}
	var v []Violation
	var fig FencingFigures
	for _, node := range sortedIDs(in.Registry) {
		windows := in.Alive[node]
		if windows == nil {
			windows = []Window{{}}
		}
		for _, gone := range absences(in.Registry[node], in.End) {
			for _, w := range windows {
				ep, late, ok := fenceEpisode(node, gone, w, in)
				if !ok {
					continue
				}
				fig.Episodes = append(fig.Episodes, ep)
				if ep.Containers > 0 && ep.Frozen && ep.FrozenAfter > fig.Worst {
					fig.Worst, fig.WorstNode = ep.FrozenAfter, node
				}
				if ep.Containers > 0 && !ep.Frozen {
					fig.NotFrozen++
				}
				if late != nil {
					v = append(v, Violation{invCutOffFenced, scn, fmt.Sprintf(
						"node %s: lease gone at %s (fence clock from %s); %d container(s) of it ran unpaused at %s, %s after the clock started, past the fence margin %s (%d such sample(s) before %s: %s; uids %s)",
						node, clock(gone.from), clock(ep.From), late.Running, clock(late.Start), late.Start.Sub(ep.From).Round(time.Millisecond),
						in.Margin, ep.Late, ep.Ended, clock(ep.Until), strings.Join(late.RunningUIDs, ", "))})
				}
			}
		}
	}
	sort.SliceStable(fig.Episodes, func(i, j int) bool { return fig.Episodes[i].From.Before(fig.Episodes[j].From) })
	return v, fig
}

// absence is a stretch without a registry key: from its expiry to the
// delivery of its next registration (registered) or the end.
type absence struct {
	from, to   time.Time
	registered bool
}

func absences(evs []RegEvent, end time.Time) []absence {
	var out []absence
	var cur *absence
	for _, e := range evs {
		switch {
		case !e.Present && cur == nil:
			cur = &absence{from: e.At}
		case e.Present && cur != nil:
			cur.to, cur.registered = e.At, true
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.to = end
		out = append(out, *cur)
	}
	return out
}

// fenceEpisode measures one absence within one window of the process; the
// first late sample, if any, is the violation.
func fenceEpisode(node string, gone absence, w Window, in FencingInput) (FenceEpisode, *NodeSample, bool) {
	ep := FenceEpisode{Node: node, Expired: gone.from, From: gone.from, Until: gone.to, Ended: "end of run"}
	if gone.registered {
		ep.Ended = "registered again"
	}
	if w.From.After(ep.From) {
		ep.From = w.From
	}
	if !w.To.IsZero() && w.To.Before(ep.Until) {
		ep.Until, ep.Ended = w.To, "process stopped"
	}
	if !ep.From.Before(ep.Until) {
		return ep, nil, false
	}
	checkUntil := ep.Until
	if ep.Ended == "registered again" {
		checkUntil = checkUntil.Add(-in.Slack)
	}
	deadline := ep.From.Add(in.Margin)
	var late *NodeSample
	first := true
	for i := range in.Samples[node] {
		s := &in.Samples[node][i]
		if !s.OK || s.End.Before(ep.From) || !s.Start.Before(ep.Until) {
			continue
		}
		if first {
			ep.Containers, first = s.Running+s.Paused, false
		}
		if s.Running == 0 && !ep.Frozen {
			ep.Frozen, ep.FrozenAfter = true, max(0, s.End.Sub(ep.From))
		}
		if s.Running > 0 && s.Start.After(deadline) && s.Start.Before(checkUntil) {
			ep.Late++
			if late == nil {
				late = s
			}
		}
	}
	return ep, late, true
}

// Liveness records when each node's process ran, for FencingInput.Alive:
// the faults call Down just before they SIGKILL, SIGSTOP or SIGTERM a
// node, and Up once it is started again or sent SIGCONT. A node never
// reported down ran throughout. It is safe for concurrent use.
type Liveness struct {
	mu      sync.Mutex
	windows map[string][]Window
}

// NewLiveness returns an empty record: every node running.
func NewLiveness() *Liveness { return &Liveness{windows: map[string][]Window{}} }

// Down: node's process stops running at at (killed, stopped or shut down).
func (l *Liveness) Down(node string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.windows[node]
	switch {
	case len(ws) == 0:
		ws = []Window{{To: at}} // it ran from the beginning
	case ws[len(ws)-1].To.IsZero():
		ws[len(ws)-1].To = at
	default:
		return // down already
	}
	l.windows[node] = ws
}

// Up: node's process runs again from at (started, or sent SIGCONT).
func (l *Liveness) Up(node string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.windows[node]
	if len(ws) > 0 && ws[len(ws)-1].To.IsZero() {
		return // running already
	}
	l.windows[node] = append(ws, Window{From: at})
}

// Windows is the record so far, for FencingInput.Alive.
func (l *Liveness) Windows() map[string][]Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]Window, len(l.windows))
	for id, ws := range l.windows {
		out[id] = append([]Window(nil), ws...)
	}
	return out
}
