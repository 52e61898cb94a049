package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"shoal/store"
)

// Violation is a broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Scenario  string `json:"scenario"`
	Detail    string `json:"detail"`
}

// Invariants, as numbered in docs/chaos.md.
const (
	invLinearizable   = "1-linearizable"
	invDeleteNoAbort  = "2-delete-never-aborted"
	invProviderDelete = "3-provider-delete-after-wait-delete"
	invAttachments    = "4-attachments-consistent"
	invNoLeftovers    = "5-no-orphans-no-stuck-deleting"
	invAckedCreates   = "6-acked-creates-accounted"
	invFencing        = "7-no-fenced-out-write"
)

// rewriteIdentical rewrites a key with its own bytes, guarded so that it
// never resurrects a removed record: a pure ModRevision bump.
func rewriteIdentical(ctx context.Context, e *env, key string) bool {
	resp, err := e.raw.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return false
	}
	kv := resp.Kvs[0]
	tx, err := e.raw.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, string(kv.Value))).Commit()
	return err == nil && tx.Succeeded
}

// checkSnapshot: never an attachment to a missing provider, never a live
// sandbox referencing a provider that is gone or lacks its attachment key.
func checkSnapshot(snap *store.Snapshot) []string {
	var bad []string
	provs := map[string]bool{}
	for _, p := range snap.Providers {
		provs[p.Meta.Workspace+"/"+p.Meta.Name] = true
	}
	att := map[string]bool{}
	for _, a := range snap.Attachments {
		att[a.Workspace+"/"+a.Provider+"/"+a.Sandbox] = true
		if !provs[a.Workspace+"/"+a.Provider] {
			bad = append(bad, fmt.Sprintf("rev %d: attachment of sandbox %s to missing provider %s", snap.Revision, a.Sandbox, a.Provider))
		}
	}
	for _, sb := range snap.Sandboxes {
		if sb.Meta.DeletionTimestamp != nil {
			continue
		}
		for _, p := range sb.GetSpec().GetProviders() {
			if !provs[sb.Meta.Workspace+"/"+p] {
				bad = append(bad, fmt.Sprintf("rev %d: live sandbox %s references removed provider %s", snap.Revision, sb.Meta.Name, p))
			} else if !att[sb.Meta.Workspace+"/"+p+"/"+sb.Meta.Name] {
				bad = append(bad, fmt.Sprintf("rev %d: live sandbox %s has no attachment key for provider %s", snap.Revision, sb.Meta.Name, p))
			}
		}
	}
	return bad
}

// checkDeletes: no DeleteSandbox without a client precondition returned
// ABORTED or INTERNAL.
func checkDeletes(ops []Op) []Violation {
	var v []Violation
	for _, o := range ops {
		if strings.HasPrefix(o.Kind, "sandbox-delete") && !o.Precondition &&
			(o.Code == codes.Aborted.String() || o.Code == codes.Internal.String()) {
			v = append(v, Violation{invDeleteNoAbort, o.Scenario, fmt.Sprintf("client %d: delete %s returned %s: %s", o.Client, o.Name, o.Code, o.Err)})
		}
	}
	return v
}

// checkLifecycle: a provider delete issued after its sandbox's wait-delete
// returned must succeed (an unreachable node is not a refusal).
func checkLifecycle(ops []Op) []Violation {
	var v []Violation
	for _, o := range ops {
		if o.Lifecycle && o.Kind == "provider-delete" && !o.ok() && !o.ambiguous() {
			v = append(v, Violation{invProviderDelete, o.Scenario, fmt.Sprintf("provider %s: %s: %s", o.Name, o.Code, o.Err)})
		}
	}
	return v
}

// checkAckedCreates: every acknowledged create is visible at the end, or a
// delete of its name that could have removed it was issued.
func checkAckedCreates(ops []Op, snap *store.Snapshot) []Violation {
	live := map[string]bool{}
	for _, sb := range snap.Sandboxes {
		live[sb.Meta.Uid] = true
	}
	var v []Violation
	for _, c := range ops {
		if c.Kind != "sandbox-create" || !c.ok() || live[c.UID] {
			continue
		}
		explained := slices.ContainsFunc(ops, func(d Op) bool {
			return strings.HasPrefix(d.Kind, "sandbox-delete") && d.Name == c.Name && d.Return >= c.Call &&
				(d.ok() || d.ambiguous())
		})
		if !explained {
			v = append(v, Violation{invAckedCreates, c.Scenario, fmt.Sprintf("sandbox %s (uid %s) created at %s is gone with no delete to explain it", c.Name, c.UID, time.Duration(c.Return))})
		}
	}
	return v
}

// fencedWrite is one applied leader-only write, from the node's log.
type fencedWrite struct {
	Msg       string `json:"msg"`
	Name      string `json:"name"`
	FenceKey  string `json:"fence_key"`
	FenceRev  int64  `json:"fence_rev"`
	CommitRev int64  `json:"commit_rev"`
}

// leaderTerms records the leader keys alive at a revision, so that the
// fencing check can follow their history from there (the revisions before
// may be compacted away).
type leaderTerms struct {
	rev   int64
	alive map[string]int64 // key → create revision
}

func readLeaderTerms(ctx context.Context, e *env) (leaderTerms, error) {
	resp, err := e.raw.Get(ctx, e.st.LeaderPrefix(), clientv3.WithPrefix())
	if err != nil {
		return leaderTerms{}, err
	}
	lt := leaderTerms{rev: resp.Header.Revision, alive: map[string]int64{}}
	for _, kv := range resp.Kvs {
		lt.alive[string(kv.Key)] = kv.CreateRevision
	}
	return lt, nil
}

// checkFencing reads every fenced write applied since the terms were read
// from the node's log and checks, against etcd's own history, that each one
// committed while its term's leader key existed (CheckFencedWrites).
func checkFencing(ctx context.Context, e *env, scn string, from leaderTerms) ([]Violation, int, error) {
	if e.hosts != nil {
		paths, err := e.nodeLogs(ctx)
		if err != nil {
			return nil, 0, err
		}
		return CheckFencedWrites(ctx, e.raw, scn, paths, from.rev)
	}
	if e.logPath == "" {
		return nil, 0, nil
	}
	return CheckFencedWrites(ctx, e.raw, scn, []string{e.logPath}, from.rev)
}

// --- linearizability (porcupine), one partition per sandbox name ---

// lzState is one sandbox name: absent, live or DELETING, and the value of
// every writer's key on the record (canonical "k=v,..." form, see writes.go).
type lzState struct {
	Exists, Deleting bool
	// Stopped: the desired run state is stopped (spec.run_state), set by
	// stop and cleared by start (runstate.go).
	Stopped bool
	Writes  string
}

// lzInput: Arg of a write is "key=value".
type lzInput struct {
	Kind, Arg string
}

type lzOutput struct {
	Code      string
	Ambiguous bool
	Exists    bool
	Deleting  bool
	Stopped   bool
	Writes    string
}

// sandboxModel: a sandbox name is absent, live (with its writers' keys) or
// DELETING. A DELETING sandbox may vanish at any moment (the coordinator's
// teardown is not a client op). An op with an ambiguous outcome may or may
// not have taken effect. A get must return the deletion state and every
// writer's key exactly as some linearisation left them: a write that a
// stale read-modify-write reverted shows as its key's older value.
var sandboxModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{lzState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(lzState), in.(lzInput), out.(lzOutput)
		starts := []lzState{s}
		if s.Deleting {
			starts = append(starts, lzState{})
		}
		var next []any
		add := func(n lzState) {
			if !slices.Contains(next, any(n)) {
				next = append(next, n)
			}
		}
		for _, s := range starts {
			if o.Ambiguous {
				add(s)
				if n, ok := apply(s, i); ok {
					add(n)
				}
				continue
			}
			if n, ok := explain(s, i, o); ok {
				add(n)
			}
		}
		return next
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(lzInput), out.(lzOutput)
		if o.Code == "OK" && i.Kind == "sandbox-get" {
			return fmt.Sprintf("get -> {%s} deleting=%v stopped=%v", o.Writes, o.Deleting, o.Stopped)
		}
		return fmt.Sprintf("%s(%s) -> %s", i.Kind, i.Arg, o.Code)
	},
	DescribeState: func(st any) string {
		s := st.(lzState)
		switch {
		case !s.Exists:
			return "absent"
		case s.Deleting:
			return fmt.Sprintf("DELETING stopped=%v {%s}", s.Stopped, s.Writes)
		}
		return fmt.Sprintf("live stopped=%v {%s}", s.Stopped, s.Writes)
	},
}

// isWrite: label writes (API) and status writes (store) set their writer's
// key on a live record.
func isWrite(kind string) bool { return kind == "sandbox-label" || kind == "sandbox-status" }

// changesState: the kinds of op whose success changes the modelled state.
// For any other kind, sandboxModel's step on an ambiguous outcome is the
// identity.
func changesState(kind string) bool {
	return kind == "sandbox-create" || isWrite(kind) || kind == "sandbox-delete" || kind == "sandbox-delete-wait" ||
		kind == "sandbox-stop" || kind == "sandbox-start"
}

// apply is the successful effect of an op.
func apply(s lzState, i lzInput) (lzState, bool) {
	switch {
	case i.Kind == "sandbox-create":
		if !s.Exists {
			return lzState{Exists: true}, true
		}
	case isWrite(i.Kind):
		if s.Exists && !s.Deleting {
			s.Writes = setWrite(s.Writes, i.Arg)
			return s, true
		}
	case i.Kind == "sandbox-stop", i.Kind == "sandbox-start":
		if s.Exists && !s.Deleting {
			s.Stopped = i.Kind == "sandbox-stop"
			return s, true
		}
	case i.Kind == "sandbox-delete", i.Kind == "sandbox-delete-wait":
		// A wait-delete's record vanishes at some point inside the call;
		// the model lets any DELETING state vanish, so both mark it.
		if s.Exists {
			s.Deleting = true
			return s, true
		}
	}
	return s, false
}

// explain returns the state after an op with a definite outcome, if the
// outcome is possible from s.
func explain(s lzState, i lzInput, o lzOutput) (lzState, bool) {
	ok := o.Code == codes.OK.String()
	switch i.Kind {
	case "sandbox-get":
		if ok {
			return s, s.Exists && s.Deleting == o.Deleting && s.Stopped == o.Stopped && s.Writes == o.Writes
		}
		if o.Code == codes.NotFound.String() {
			return s, !s.Exists
		}
	case "sandbox-create":
		switch {
		case ok:
			return apply(s, i)
		case o.Code == codes.AlreadyExists.String():
			return s, s.Exists
		case o.Code == codes.FailedPrecondition.String():
			return s, !s.Exists // a provider was missing or terminating
		}
	case "sandbox-label", "sandbox-status", "sandbox-attach", "sandbox-detach":
		switch {
		case ok && isWrite(i.Kind):
			return apply(s, i)
		case ok:
			return s, s.Exists && !s.Deleting
		case o.Code == codes.NotFound.String():
			return s, !s.Exists
		case o.Code == codes.FailedPrecondition.String():
			// Deleting, or (attach/detach) a provider problem.
			return s, s.Exists && (s.Deleting || !isWrite(i.Kind))
		}
	case "sandbox-delete", "sandbox-delete-wait":
		switch {
		case ok:
			return apply(s, i)
		case o.Code == codes.NotFound.String():
			return s, !s.Exists
		}
	case "sandbox-stop", "sandbox-start":
		switch {
		case ok:
			return apply(s, i)
		case o.Code == codes.NotFound.String():
			return s, !s.Exists
		case o.Code == codes.FailedPrecondition.String():
			// Being deleted; or a start of a sandbox meant to run whose
			// container failed (phase ERROR, not modelled): refused
			// without a change.
			return s, s.Exists && (s.Deleting || i.Kind == "sandbox-start" && !s.Stopped)
		}
	}
	return s, false
}

var modelled = map[string]bool{"sandbox-create": true, "sandbox-get": true, "sandbox-label": true, "sandbox-status": true,
	"sandbox-attach": true, "sandbox-detach": true, "sandbox-delete": true, "sandbox-delete-wait": true,
	"sandbox-stop": true, "sandbox-start": true}

// partitionHistory turns the modelled ops into one porcupine history per
// sandbox name. An op with an ambiguous outcome may take effect any time
// until end, which makes it concurrent with everything after it: each one
// multiplies the orders and states the checker must try. Two kinds are left
// out because they cannot change the verdict:
//
//   - an ambiguous op that cannot change the modelled state (a get, an
//     attach or detach): its output is unknown and its step the identity;
//   - an ambiguous write whose value no get of that name returned. Values
//     are unique, and nothing but a get observes a key, so if a
//     linearisation applies the write, no get lies between it and the
//     next change of its key, and the same order without the write is a
//     linearisation too. Most ambiguous writes are calls that a dead node
//     refused; this keeps them from swamping the check.
func partitionHistory(ops []Op, end int64) map[string][]porcupine.Operation {
	seen := map[string]map[string]bool{} // name → "k=v" returned by a get
	for _, o := range ops {
		if o.Kind == "sandbox-get" && o.ok() && o.Writes != "" {
			if seen[o.Name] == nil {
				seen[o.Name] = map[string]bool{}
			}
			for _, kv := range strings.Split(o.Writes, ",") {
				seen[o.Name][kv] = true
			}
		}
	}
	byName := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if !modelled[o.Kind] || o.Name == "" {
			continue
		}
		ret := o.Return
		if o.ambiguous() {
			if !changesState(o.Kind) || (isWrite(o.Kind) && !seen[o.Name][o.Arg]) {
				continue
			}
			ret = end + 1 // it may take effect any time until the end
		}
		byName[o.Name] = append(byName[o.Name], porcupine.Operation{
			ClientId: o.Client, Input: lzInput{o.Kind, o.Arg}, Call: o.Call, Return: ret,
			Output: lzOutput{Code: o.Code, Ambiguous: o.ambiguous(), Exists: o.Exists, Deleting: o.Deleting, Stopped: o.Stopped, Writes: o.Writes},
		})
	}
	return byName
}

// checkLinearizable runs porcupine over each sandbox name's history. On a
// failure it writes the visualisation into dir.
func checkLinearizable(ops []Op, scn, dir string, end int64, timeout time.Duration) ([]Violation, string) {
	byName := partitionHistory(ops, end)
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	model := sandboxModel.ToModel()
	var v []Violation
	inconclusive := 0
	for _, n := range names {
		res, info := porcupine.CheckOperationsVerbose(model, byName[n], timeout)
		switch res {
		case porcupine.Illegal:
			path := filepath.Join(dir, fmt.Sprintf("linearizability-%s.html", n))
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = porcupine.VisualizePath(model, info, path)
			}
			v = append(v, Violation{invLinearizable, scn, fmt.Sprintf("history of sandbox %s (%d ops) is not linearizable; see %s", n, len(byName[n]), path)})
		case porcupine.Unknown:
			inconclusive++
		}
	}
	note := fmt.Sprintf("%d objects checked", len(names))
	if inconclusive > 0 {
		note += fmt.Sprintf(", %d inconclusive (timeout)", inconclusive)
	}
	return v, note
}
