package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"shoal/docker"
)

// Invariant 8, at most one running container per sandbox uid across all
// engines, is checked from the engines themselves, never through shoal: an
// EngineSampler lists every node's own Docker engine every Interval (all
// engines at once, one round) and looks for a uid with more than one
// running container. A paused container runs nothing and does not count.
//
// The same rounds give invariant 9 (fencing.go) each node's containers over
// time: how many of the containers on node N's engine labelled with node N
// ran, and how many were paused.

// DefaultSampleInterval is how often the samplers look.
const DefaultSampleInterval = 200 * time.Millisecond

// EngineSampler samples the engines; Run drives it.
type EngineSampler struct {
	engines  map[string]*client.Client
	ids      []string // sorted
	cluster  string
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	rounds   int
	errs     int
	lastErr  string
	maxAll   int                   // containers in one round, all engines
	maxRun   int                   // running containers in one round
	open     map[string]*Duplicate // uid → a double run still seen
	dups     []Duplicate
	timeline map[string][]NodeSample
}

// NodeSample is one list of a node's own engine: the containers on it
// labelled with that node.
type NodeSample struct {
	// Start and End bound the list call: the states it returned held at
	// some instant between them.
	Start, End time.Time
	// OK is false when the engine did not answer (the counts are zero).
	OK              bool
	Running, Paused int
	RunningUIDs     []string // the first few, for violation details
}

// Duplicate is one stretch of rounds in which a uid had more than one
// running container.
type Duplicate struct {
	UID string
	// Containers are "<engine>/<container id>" of every running container
	// of the uid seen during the stretch.
	Containers  []string
	First, Last time.Time // start of the first and the last round that saw it
	Rounds      int
}

// EngineFigures are the sampler's figures for the report.
type EngineFigures struct {
	Rounds        int `json:"rounds"`
	ListErrors    int `json:"list_errors"`
	MaxContainers int `json:"max_containers"` // in one round, all engines
	MaxRunning    int `json:"max_running"`    // in one round, all engines
}

// NewEngineSampler samples engines, a node id → that node's own engine.
// cluster, if set, keeps only containers labelled with that cluster id;
// interval 0 is DefaultSampleInterval.
func NewEngineSampler(engines map[string]*client.Client, cluster string, interval time.Duration) *EngineSampler {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	ids := make([]string, 0, len(engines))
	for id := range engines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return &EngineSampler{engines: engines, ids: ids, cluster: cluster, interval: interval, now: time.Now,
		open: map[string]*Duplicate{}, timeline: map[string][]NodeSample{}}
}

// engineList is one engine's answer in a round.
type engineList struct {
	node       string
	start, end time.Time
	err        error
	containers []container.Summary
}

// Run samples until ctx ends, one round every interval (a slow round
// delays the next; none overlap). It returns nil when ctx ends.
func (s *EngineSampler) Run(ctx context.Context) error {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		round := s.list(ctx)
		if ctx.Err() != nil {
			s.closeAll()
			return nil // a round cut short by the end proves nothing
		}
		s.observe(round)
		select {
		case <-ctx.Done():
			s.closeAll()
			return nil
		case <-tick.C:
		}
	}
}

// list lists every engine at once and waits for all of them.
func (s *EngineSampler) list(ctx context.Context) []engineList {
	f := filters.NewArgs(filters.Arg("label", docker.LabelManaged+"=true"))
	if s.cluster != "" {
		f.Add("label", docker.LabelCluster+"="+s.cluster)
	}
	out := make([]engineList, len(s.ids))
	var wg sync.WaitGroup
	for i, id := range s.ids {
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l := engineList{node: id, start: s.now()}
			l.containers, l.err = s.engines[id].ContainerList(lctx, container.ListOptions{All: true, Filters: f})
			l.end = s.now()
			out[i] = l
		})
	}
	wg.Wait()
	return out
}

// observe checks one round and records each node's sample. Engines that
// several nodes share (a test fallback) list the same containers: each
// container counts once.
func (s *EngineSampler) observe(round []engineList) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rounds++
	var at time.Time
	seen := map[string]bool{}
	running := map[string][]string{} // uid → "<engine>/<id>"
	all, run := 0, 0
	for _, l := range round {
		if at.IsZero() || l.start.Before(at) {
			at = l.start
		}
		ns := NodeSample{Start: l.start, End: l.end, OK: l.err == nil}
		if l.err != nil {
			s.errs++
			s.lastErr = fmt.Sprintf("%s: %v", l.node, l.err)
		}
		for _, c := range l.containers {
			own := c.Labels[docker.LabelNode] == l.node
			if own {
				switch c.State {
				case container.StateRunning:
					ns.Running++
					if len(ns.RunningUIDs) < 4 {
						ns.RunningUIDs = append(ns.RunningUIDs, c.Labels[docker.LabelUID])
					}
				case container.StatePaused:
					ns.Paused++
				}
			}
			if seen[c.ID] {
				continue
			}
			seen[c.ID] = true
			all++
			if c.State == container.StateRunning {
				run++
				uid := c.Labels[docker.LabelUID]
				running[uid] = append(running[uid], l.node+"/"+short(c.ID))
			}
		}
		s.timeline[l.node] = append(s.timeline[l.node], ns)
	}
	s.maxAll, s.maxRun = max(s.maxAll, all), max(s.maxRun, run)
	for uid, cs := range running {
		if len(cs) < 2 {
			continue
		}
		d := s.open[uid]
		if d == nil {
			d = &Duplicate{UID: uid, First: at}
			s.open[uid] = d
		}
		d.Last = at
		d.Rounds++
		for _, c := range cs {
			if !slices.Contains(d.Containers, c) {
				d.Containers = append(d.Containers, c)
			}
		}
	}
	for uid, d := range s.open {
		if len(running[uid]) < 2 {
			s.dups = append(s.dups, *d)
			delete(s.open, uid)
		}
	}
}

func (s *EngineSampler) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, d := range s.open {
		s.dups = append(s.dups, *d)
		delete(s.open, uid)
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Duplicates are the stretches in which a uid ran more than once.
func (s *EngineSampler) Duplicates() []Duplicate {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.dups)
	for _, d := range s.open {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	return out
}

// Violations are invariant 8's: one per stretch of rounds in which a uid
// had more than one running container.
func (s *EngineSampler) Violations(scn string) []Violation {
	var v []Violation
	for _, d := range s.Duplicates() {
		v = append(v, Violation{invOneRunning, scn, fmt.Sprintf(
			"sandbox uid %s had %d running containers at once (%s), in %d sample(s) from %s to %s",
			d.UID, len(d.Containers), strings.Join(d.Containers, ", "), d.Rounds, clock(d.First), clock(d.Last))})
	}
	return v
}

// Timeline is every node's samples, oldest first.
func (s *EngineSampler) Timeline() map[string][]NodeSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]NodeSample, len(s.timeline))
	for id, ss := range s.timeline {
		out[id] = slices.Clone(ss)
	}
	return out
}

// Figures are the sampler's counts so far.
func (s *EngineSampler) Figures() EngineFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return EngineFigures{Rounds: s.rounds, ListErrors: s.errs, MaxContainers: s.maxAll, MaxRunning: s.maxRun}
}

// LastError is the last failed list, for a run that wants to say why an
// engine was not sampled ("" if none failed).
func (s *EngineSampler) LastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// clock formats an instant for violation details.
func clock(t time.Time) string { return t.Format("15:04:05.000") }
