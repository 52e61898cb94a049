package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/store"
)

// Invariant 12, convergence: after every fault healed, within a bound,
//
//   - every node is Ready (its registry key exists);
//   - every etcd member is started, a voter (no learner left) and healthy
//     (its own Status answers without errors and knows a raft leader), and
//     no alarm is raised;
//   - no sandbox is UNKNOWN, DELETING (or marked for deletion),
//     PROVISIONING, or PAUSED (the suite never pauses one: a paused
//     sandbox is a freeze that was never thawed), STOPPING or STARTING,
//     nor has a stop or start its agent has not acted on;
//   - every engine's containers match the records: a READY or STOPPED
//     sandbox has exactly one container, on its own node's engine (running
//     for READY, not running for one STOPPED on request); an ERROR one at
//     most one; no container is paused; no
//     container of a sandbox is on another node's engine; no container is
//     without a record;
//   - every provider whose sandboxes are gone is deletable: every attach/
//     key is held by a record that lists the provider with that uid, no
//     release/ key is left (nothing is being deleted), and no provider is
//     still terminating (its finalisation waits for nothing any more).
//
// CheckConvergence polls these until they all hold, or the bound passes;
// what is unmet then is a violation each.

// ConvergenceConfig is what the convergence check reads.
type ConvergenceConfig struct {
	Etcd   *clientv3.Client
	Prefix string
	// Engines are the nodes' own engines, node id → client.
	Engines map[string]*client.Client
	// Cluster, if set, keeps only containers labelled with this cluster id.
	Cluster string
	// Nodes must all be Ready (default: the keys of Engines).
	Nodes []string
	// Bound is how long the cluster may take (--deleting-bound).
	Bound time.Duration
	// Interval between polls (default 250ms).
	Interval time.Duration
}

// ConvergenceFigures are the check's figures for the report.
type ConvergenceFigures struct {
	Converged bool `json:"converged"`
	// After is how long it took from the call (the faults healed) until
	// everything held, or the bound.
	After time.Duration `json:"after_ns"`
	Polls int           `json:"polls"`
	// Unmet is what did not hold at the last poll.
	Unmet []string `json:"unmet,omitempty"`
}

// CheckConvergence polls until the cluster has converged or cfg.Bound
// passes (or ctx ends).
func CheckConvergence(ctx context.Context, scn string, cfg ConvergenceConfig) ([]Violation, ConvergenceFigures) {
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Nodes == nil {
		cfg.Nodes = sortedIDs(cfg.Engines)
	}
	start := time.Now()
	deadline := start.Add(cfg.Bound)
	var fig ConvergenceFigures
	for {
		fig.Polls++
		st := gatherConvergence(ctx, cfg)
		fig.Unmet = st.gaps(cfg.Nodes, sortedIDs(cfg.Engines))
		fig.After = time.Since(start)
		if len(fig.Unmet) == 0 {
			fig.Converged = true
			return nil, fig
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var v []Violation
			for _, u := range fig.Unmet {
				v = append(v, Violation{invConverged, scn, fmt.Sprintf("not converged %s after the faults healed: %s", cfg.Bound, u)})
			}
			return v, fig
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Interval):
		}
	}
}

// convergenceState is one poll's reads.
type convergenceState struct {
	errs       []string // reads that failed
	ready      map[string]bool
	members    []memberState
	alarms     []string
	sandboxes  []*shoalv1.Sandbox
	providers  []*shoalv1.Provider
	attach     []store.Attachment // Releasing for release/ keys
	containers []engineContainer
}

type memberState struct {
	name    string
	id      uint64
	url     string
	learner bool
	err     string // Status failed, reported errors, or knows no leader
}

type engineContainer struct {
	engine string
	c      container.Summary
}

func gatherConvergence(ctx context.Context, cfg ConvergenceConfig) convergenceState {
	st := convergenceState{ready: map[string]bool{}}
	p := strings.TrimSuffix(cfg.Prefix, "/")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cfg.Etcd.Txn(rctx).Then(
		clientv3.OpGet(p+"/nodes/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(p+"/sandboxes/", clientv3.WithPrefix()),
		clientv3.OpGet(p+"/providers/", clientv3.WithPrefix()),
		clientv3.OpGet(p+"/attach/", clientv3.WithPrefix()),
		clientv3.OpGet(p+"/release/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		st.errs = append(st.errs, "read the keyspace: "+err.Error())
	} else {
		r := resp.Responses
		for _, kv := range r[0].GetResponseRange().GetKvs() {
			st.ready[strings.TrimPrefix(string(kv.Key), p+"/nodes/")] = true
		}
		for _, kv := range r[1].GetResponseRange().GetKvs() {
			var sb shoalv1.Sandbox
			if err := proto.Unmarshal(kv.Value, &sb); err != nil {
				st.errs = append(st.errs, fmt.Sprintf("sandbox record %s does not decode: %v", kv.Key, err))
				continue
			}
			st.sandboxes = append(st.sandboxes, &sb)
		}
		for _, kv := range r[2].GetResponseRange().GetKvs() {
			var pr shoalv1.Provider
			if err := proto.Unmarshal(kv.Value, &pr); err != nil {
				st.errs = append(st.errs, fmt.Sprintf("provider record %s does not decode: %v", kv.Key, err))
				continue
			}
			st.providers = append(st.providers, &pr)
		}
		for i, releasing := range []bool{false, true} {
			for _, kv := range r[3+i].GetResponseRange().GetKvs() {
				parts := strings.Split(strings.TrimPrefix(string(kv.Key), p+"/"), "/")
				if len(parts) != 4 {
					st.errs = append(st.errs, fmt.Sprintf("malformed key %s", kv.Key))
					continue
				}
				st.attach = append(st.attach, store.Attachment{Workspace: parts[1], Provider: parts[2], Sandbox: parts[3], UID: string(kv.Value), Releasing: releasing})
			}
		}
	}
	st.members, st.alarms, err = gatherMembers(rctx, cfg.Etcd)
	if err != nil {
		st.errs = append(st.errs, "etcd members: "+err.Error())
	}
	f := filters.NewArgs(filters.Arg("label", docker.LabelManaged+"=true"))
	if cfg.Cluster != "" {
		f.Add("label", docker.LabelCluster+"="+cfg.Cluster)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, id := range sortedIDs(cfg.Engines) {
		wg.Go(func() {
			cs, err := cfg.Engines[id].ContainerList(rctx, container.ListOptions{All: true, Filters: f})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				st.errs = append(st.errs, fmt.Sprintf("engine of node %s: %v", id, err))
				return
			}
			for _, c := range cs {
				if !seen[c.ID] { // an engine several nodes share lists it once per node
					seen[c.ID] = true
					st.containers = append(st.containers, engineContainer{engine: id, c: c})
				}
			}
		})
	}
	wg.Wait()
	slices.SortFunc(st.containers, func(a, b engineContainer) int { return strings.Compare(a.engine+a.c.ID, b.engine+b.c.ID) })
	return st
}

// gatherMembers reads the member list and asks each member itself for its
// status.
func gatherMembers(ctx context.Context, cli *clientv3.Client) ([]memberState, []string, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make([]memberState, len(ml.Members))
	var wg sync.WaitGroup
	for i, m := range ml.Members {
		out[i] = memberState{name: m.Name, id: m.ID, learner: m.IsLearner}
		if len(m.ClientURLs) == 0 {
			continue // not started: gaps says so
		}
		out[i].url = m.ClientURLs[0]
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := cli.Status(sctx, out[i].url)
			switch {
			case err != nil:
				out[i].err = err.Error()
			case len(s.Errors) > 0:
				out[i].err = strings.Join(s.Errors, "; ")
			case s.Leader == 0:
				out[i].err = "knows no raft leader"
			}
		})
	}
	wg.Wait()
	var alarms []string
	al, err := cli.AlarmList(ctx)
	if err != nil {
		return out, nil, err
	}
	for _, a := range al.Alarms {
		alarms = append(alarms, fmt.Sprintf("alarm %s on member %x", a.Alarm, a.MemberID))
	}
	return out, alarms, nil
}

// gaps lists what has not converged.
func (st convergenceState) gaps(nodes, engines []string) []string {
	var out []string
	out = append(out, st.errs...)
	for _, n := range nodes {
		if !st.ready[n] {
			out = append(out, fmt.Sprintf("node %s is not Ready", n))
		}
	}
	for _, m := range st.members {
		name := m.name
		if name == "" {
			name = fmt.Sprintf("%x", m.id)
		}
		switch {
		case m.url == "":
			out = append(out, fmt.Sprintf("etcd member %s has not started", name))
		case m.learner:
			out = append(out, fmt.Sprintf("etcd member %s is still a learner", name))
		}
		if m.err != "" {
			out = append(out, fmt.Sprintf("etcd member %s (%s) is not healthy: %s", name, m.url, m.err))
		}
	}
	out = append(out, st.alarms...)

	type rec struct {
		sb        *shoalv1.Sandbox
		node, ref string
	}
	byUID := map[string]rec{}
	byName := map[string]*shoalv1.Sandbox{} // ws/name
	var stuck []*shoalv1.Sandbox            // being deleted: said with what may hold them
	for _, sb := range st.sandboxes {
		m := sb.GetMeta()
		ref := m.GetWorkspace() + "/" + m.GetName()
		byUID[m.GetUid()] = rec{sb: sb, node: store.NodeOf(sb), ref: ref}
		byName[ref] = sb
		switch ph := sb.GetStatus().GetPhase(); {
		case m.GetDeletionTimestamp() != nil || ph == shoalv1.SandboxPhase_DELETING:
			stuck = append(stuck, sb)
		case ph == shoalv1.SandboxPhase_UNKNOWN, ph == shoalv1.SandboxPhase_PROVISIONING, ph == shoalv1.SandboxPhase_PAUSED:
			out = append(out, fmt.Sprintf("sandbox %s is %s", ref, ph))
		default:
			if why := runStateSettling(sb); why != "" {
				out = append(out, fmt.Sprintf("sandbox %s: stop or start not acted on: %s", ref, why))
			}
		}
	}

	// Containers against records.
	onOwn := map[string][]engineContainer{} // uid → its containers on its node's engine
	for _, ec := range st.containers {
		uid := ec.c.Labels[docker.LabelUID]
		desc := fmt.Sprintf("container %s (uid %s, labelled node %s) on the engine of node %s", short(ec.c.ID), uid, ec.c.Labels[docker.LabelNode], ec.engine)
		r, ok := byUID[uid]
		switch {
		case !ok:
			out = append(out, desc+" has no sandbox record")
			continue
		case r.node != ec.engine:
			out = append(out, fmt.Sprintf("%s belongs to sandbox %s of node %s", desc, r.ref, r.node))
			continue
		}
		if ec.c.State == container.StatePaused {
			out = append(out, fmt.Sprintf("%s of sandbox %s is paused", desc, r.ref))
		}
		onOwn[uid] = append(onOwn[uid], ec)
	}
	for _, sb := range stuck {
		// What a stuck delete waits for: its owner (ready or not) and its
		// containers on the engines.
		m, node := sb.GetMeta(), store.NodeOf(sb)
		var cs []string
		for _, ec := range onOwn[m.GetUid()] {
			cs = append(cs, short(ec.c.ID)+" "+string(ec.c.State))
		}
		since := "no deletion timestamp"
		if m.GetDeletionTimestamp() != nil {
			since = "deleting since " + m.GetDeletionTimestamp().AsTime().Format(time.RFC3339Nano)
		}
		onEngine := fmt.Sprintf("containers on its node's engine %v", cs)
		if !slices.Contains(engines, node) {
			onEngine = "its node's engine not sampled"
		}
		out = append(out, fmt.Sprintf("sandbox %s/%s is still being deleted (uid %s, node %s ready %v, phase %s, %s, status %q, %s)",
			m.GetWorkspace(), m.GetName(), m.GetUid(), node, st.ready[node], sb.GetStatus().GetPhase(), since, sb.GetStatus().GetMessage(), onEngine))
	}
	for uid, r := range byUID {
		if !slices.Contains(engines, r.node) {
			continue // a node whose engine is not sampled (removed, or never placed)
		}
		cs := onOwn[uid]
		switch ph := r.sb.GetStatus().GetPhase(); ph {
		case shoalv1.SandboxPhase_READY, shoalv1.SandboxPhase_STOPPED:
			if len(cs) != 1 {
				out = append(out, fmt.Sprintf("sandbox %s (%s) has %d containers on the engine of its node %s, not 1", r.ref, ph, len(cs), r.node))
			} else if ph == shoalv1.SandboxPhase_READY && cs[0].c.State != container.StateRunning {
				out = append(out, fmt.Sprintf("sandbox %s is READY but its container %s is %s", r.ref, short(cs[0].c.ID), cs[0].c.State))
			} else if stoppedAcked(r.sb) && cs[0].c.State == container.StateRunning {
				out = append(out, fmt.Sprintf("sandbox %s is STOPPED on request but its container %s is %s", r.ref, short(cs[0].c.ID), cs[0].c.State))
			}
		default:
			if len(cs) > 1 {
				out = append(out, fmt.Sprintf("sandbox %s (%s) has %d containers on the engine of its node %s", r.ref, ph, len(cs), r.node))
			}
		}
	}

	// Providers deletable.
	for _, a := range st.attach {
		key := fmt.Sprintf("%s/%s/%s", a.Workspace, a.Provider, a.Sandbox)
		if a.Releasing {
			out = append(out, fmt.Sprintf("release key %s is left: provider %s stays undeletable", key, a.Provider))
			continue
		}
		sb := byName[a.Workspace+"/"+a.Sandbox]
		if sb == nil || sb.GetMeta().GetUid() != a.UID || !slices.Contains(sb.GetSpec().GetProviders(), a.Provider) {
			out = append(out, fmt.Sprintf("attach key %s (uid %s) is held by no sandbox: provider %s stays undeletable", key, a.UID, a.Provider))
		}
	}
	for _, pr := range st.providers {
		if pr.GetMeta().GetDeletionTimestamp() != nil {
			out = append(out, fmt.Sprintf("provider %s/%s is still terminating", pr.GetMeta().GetWorkspace(), pr.GetMeta().GetName()))
		}
	}
	slices.Sort(out)
	return out
}
