package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

func register(t *testing.T, s *store.Store, c *clientv3.Client, name string, max int32, labels map[string]string) clientv3.LeaseID {
	t.Helper()
	ctx := ctxT(t)
	l, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: name, Address: name + ":7443", MaxSandboxes: max, Labels: labels}, Instance: name}, l.ID); err != nil {
		t.Fatal(err)
	}
	return l.ID
}

func placed(t *testing.T, s *store.Store) map[string]int {
	t.Helper()
	nodes, err := s.Nodes(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, n := range nodes {
		out[n.Name] = int(n.Status.Sandboxes)
	}
	return out
}

// Placement spreads creates over the Ready nodes, fewest first; a node id
// held by a live node is refused, its own previous instance is taken over.
func TestPlacementSpreadsAndRegistryIsUnique(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		register(t, s, c, n, 0, nil)
	}
	for i := range 30 {
		sb, err := s.CreateSandboxOn(ctx, sandbox(fmt.Sprintf("s%02d", i)), store.Placement{}, "")
		if err != nil {
			t.Fatal(err)
		}
		if sb.Spec.Node == "" {
			t.Fatal("created without spec.node")
		}
	}
	for n, count := range placed(t, s) {
		if count < 8 || count > 12 {
			t.Fatalf("node %s holds %d of 30: %v", n, count, placed(t, s))
		}
	}
	// Removal frees the slot.
	sb, _ := s.GetSandbox(ctx, "default", "s00")
	before := placed(t, s)[sb.Spec.Node]
	if _, err := s.MarkSandboxDeleting(ctx, "default", "s00", store.Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTeardown(ctx, "default", "s00", sb.Meta.Uid); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSandbox(ctx, "default", "s00", sb.Meta.Uid, nil, 0); err != nil {
		t.Fatal(err)
	}
	if after := placed(t, s)[sb.Spec.Node]; after != before-1 {
		t.Fatalf("removal left %d on %s, was %d", after, sb.Spec.Node, before)
	}

	l, _ := c.Grant(ctx, 60)
	err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "other:1"}, Instance: "another"}, l.ID)
	if shoal.KindOf(err) != shoal.KindAlreadyExists || !strings.Contains(err.Error(), "n1:7443") {
		t.Fatalf("duplicate node id: %v; want ALREADY_EXISTS naming the holder's address", err)
	}
	if err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "n1:7443"}, Instance: "n1"}, l.ID); err != nil {
		t.Fatalf("the same instance restarted: %v", err)
	}
}

// Capacity holds under concurrent creates: 20 at once on three nodes of 5
// give exactly 15 sandboxes and 5 refusals that say why for each node.
// Cordon, --node, --node-selector and a lost lease are obeyed.
func TestPlacementCapacityCordonSelector(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	register(t, s, c, "a", 5, map[string]string{"gpu": "a100"})
	register(t, s, c, "b", 5, nil)
	gone := register(t, s, c, "c", 5, nil)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.CreateSandboxOn(ctx, sandbox(fmt.Sprintf("c%02d", i)), store.Placement{}, "")
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case shoal.KindOf(err) == shoal.KindFailedPrecondition && strings.Contains(err.Error(), "no node fits") && strings.Contains(err.Error(), "full (5/5)"):
			refused++
		default:
			t.Fatalf("create: %v", err)
		}
	}
	if ok != 15 || refused != 5 {
		t.Fatalf("%d created, %d refused; want 15 and 5 (%v)", ok, refused, placed(t, s))
	}
	for n, count := range placed(t, s) {
		if count != 5 {
			t.Fatalf("node %s holds %d, want 5", n, count)
		}
	}
	// Free one slot on each node, then steer.
	for _, n := range []string{"a", "b", "c"} {
		page, _ := s.ListSandboxes(ctx, "default", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool { return sb.Spec.Node == n })
		victim := page.Items[0]
		if _, err := s.MarkSandboxDeleting(ctx, "default", victim.Meta.Name, store.Preconditions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordTeardown(ctx, "default", victim.Meta.Name, victim.Meta.Uid); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RemoveSandbox(ctx, "default", victim.Meta.Name, victim.Meta.Uid, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CordonNode(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, gone); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateSandboxOn(ctx, sandbox("sel"), store.Placement{Selector: map[string]string{"gpu": "h100"}}, "")
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition ||
		!strings.Contains(msg, "a lacks label gpu=h100") || !strings.Contains(msg, "b cordoned") || !strings.Contains(msg, "c not ready") {
		t.Fatalf("selector nobody matches: %v", err)
	}
	sb, err := s.CreateSandboxOn(ctx, sandbox("gpu"), store.Placement{Selector: map[string]string{"gpu": "a100"}}, "")
	if err != nil || sb.Spec.Node != "a" {
		t.Fatalf("selector gpu=a100: %v on %q", err, sb.GetSpec().GetNode())
	}
	if _, err := s.CreateSandboxOn(ctx, sandbox("on-b"), store.Placement{Node: "b"}, ""); shoal.KindOf(err) != shoal.KindFailedPrecondition {
		t.Fatalf("--node of a cordoned node: %v", err)
	}
	if err := s.CordonNode(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	if sb, err := s.CreateSandboxOn(ctx, sandbox("on-b"), store.Placement{Node: "b"}, ""); err != nil || sb.Spec.Node != "b" {
		t.Fatalf("--node b after uncordon: %v", err)
	}
	if _, err := s.CreateSandboxOn(ctx, sandbox("nowhere"), store.Placement{Node: "zz"}, ""); shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "not known") {
		t.Fatalf("--node of an unknown node: %v", err)
	}
	if err := s.CordonNode(ctx, "zz", true); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("cordon an unknown node: %v", err)
	}
	// GetNode reads one node's keys; it says what Nodes says of it (a
	// Ready one with sandboxes, a cordoned one, a NotReady one).
	if err := s.CordonNode(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	all, err := s.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range all {
		got, err := s.GetNode(ctx, want.Name)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("GetNode(%s) = %v (%v), Nodes has %v", want.Name, got, err, want)
		}
	}
	if _, err := s.GetNode(ctx, "zz"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Errorf("GetNode of an unknown node: %v", err)
	}
}

// A create retried with its request id returns the record it made; another
// request for the same name is ALREADY_EXISTS.
func TestCreateRetriedWithItsRequestID(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	register(t, s, c, "n1", 0, nil)
	first, err := s.CreateSandboxOn(ctx, sandbox("r"), store.Placement{}, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.CreateSandboxOn(ctx, sandbox("r"), store.Placement{}, "req-1")
	if err != nil || again.Meta.Uid != first.Meta.Uid || again.Meta.ResourceVersion != first.Meta.ResourceVersion {
		t.Fatalf("retry: %v %v; want the first record back unchanged", again.GetMeta(), err)
	}
	_, err = s.CreateSandboxOn(ctx, sandbox("r"), store.Placement{}, "req-2")
	mustKind(t, err, shoal.KindAlreadyExists)
	_, err = s.CreateSandboxOn(ctx, sandbox("r"), store.Placement{}, "")
	mustKind(t, err, shoal.KindAlreadyExists)
	other, err := s.CreateSandboxOn(ctx, sandbox("r2"), store.Placement{}, "req-1")
	if err != nil || other.Meta.Uid == first.Meta.Uid {
		t.Fatalf("the same request id for another name: %v, uid %s", err, other.GetMeta().GetUid())
	}
}

// Placement chooses from the watch cache's copy of the registry, and the
// create's Txn compares what it chose from: a copy that still shows a
// cordoned node uncordoned, a departed node live, or a re-registered node
// with its old labels places nothing there. The creates retry from etcd
// and are refused with etcd's reasons.
func TestPlacementFromAStaleRegistryCopy(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	writer := store.New(raw, store.Options{})
	b, _, bc := cachedNode(t, "http://"+srv.Endpoint())
	register(t, writer, raw, "cordoned", 0, nil)
	gone := register(t, writer, raw, "gone", 0, nil)
	relabelled := register(t, writer, raw, "relabelled", 0, map[string]string{"gpu": "a100"})
	// What the copy has, sorted.
	copyOf := func() string {
		live, cordoned, usable := b.RegistryCopyForTest()
		slices.Sort(live)
		slices.Sort(cordoned)
		return fmt.Sprintf("live %v cordoned %v usable %v", live, cordoned, usable)
	}
	waitCopy := func(want string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, "the registry copy is "+want, func() (bool, error) { return copyOf() == want, nil })
	}
	waitCopy("live [cordoned gone relabelled] cordoned [] usable true")
	// From the copy, while it is current: placed on a live node.
	if sb, err := b.CreateSandboxOn(ctx, sandbox("first"), store.Placement{Selector: map[string]string{"gpu": "a100"}}, ""); err != nil || sb.Spec.Node != "relabelled" {
		t.Fatalf("create from a current copy: %v on %q", err, sb.GetSpec().GetNode())
	}
	restore := b.HoldRegistryCopyForTest()

	if err := writer.CordonNode(ctx, "cordoned", true); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Revoke(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Revoke(ctx, relabelled); err != nil {
		t.Fatal(err)
	}
	register(t, writer, raw, "relabelled", 0, map[string]string{"gpu": "none"})
	waitCopy("live [cordoned relabelled] cordoned [cordoned] usable true")
	restore()
	if got := copyOf(); got != "live [cordoned gone relabelled] cordoned [] usable true" {
		t.Fatalf("the held copy was not put back: %s", got)
	}

	_, err := b.CreateSandboxOn(ctx, sandbox("stale-gpu"), store.Placement{Selector: map[string]string{"gpu": "a100"}}, "")
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(msg, "relabelled lacks label gpu=a100") {
		t.Fatalf("a selector only the stale copy matches: %v", err)
	}
	for _, node := range []string{"cordoned", "gone"} {
		_, err := b.CreateSandboxOn(ctx, sandbox("on-"+node), store.Placement{Node: node}, "")
		if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(msg, node+" cordoned") && !strings.Contains(msg, node+" not ready") {
			t.Fatalf("--node %s from a stale copy: %v", node, err)
		}
	}
	// Nothing was placed on them: every record's node is the one it was
	// created on.
	resp, err := bc.Get(ctx, b.SandboxKey("default", ""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Fatalf("%d sandboxes stored, want only the first", resp.Count)
	}
}

// Creates placed at once through one node with a watch cache spread over
// the nodes: each choice counts, besides the copy's records, this node's
// creates in flight and those the copy has not yet seen, and is counted
// itself in the same step (the copy lags a burst of creates: with its
// counts alone they all chose the same node).
func TestConcurrentCreatesSpreadFromTheCache(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	writer := store.New(raw, store.Options{})
	b, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	nodes := []string{"n0", "n1", "n2", "n3"}
	for _, n := range nodes {
		register(t, writer, raw, n, 0, nil)
	}
	// Placement chooses among the nodes its copy of the registry has (a
	// node that registered a moment ago is chosen once the copy has it).
	testenv.Eventually(t, 10*time.Second, "the registry copy has the 4 nodes", func() (bool, error) {
		live, _, usable := b.RegistryCopyForTest()
		return usable && len(live) == len(nodes), fmt.Errorf("live %v, usable %v", live, usable)
	})
	const creates = 80
	var wg sync.WaitGroup
	errs := make(chan error, creates)
	for i := range creates {
		wg.Go(func() {
			if _, err := b.CreateSandboxOn(ctx, sandbox(fmt.Sprintf("s%02d", i)), store.Placement{}, ""); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	per := map[string]int{}
	page, err := writer.ListSandboxes(ctx, "", store.ListOptions{Limit: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range page.Items {
		per[store.NodeOf(sb)]++
	}
	for _, n := range nodes {
		if per[n] < creates/len(nodes)/2 {
			t.Errorf("node %s got %d of %d creates: %v", n, per[n], creates, per)
		}
	}
	// The cached store's node list counts from its copy what the slot
	// keys say.
	listed, err := b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fromKeys := placed(t, writer)
	for _, n := range listed {
		if int(n.Status.Sandboxes) != per[n.Name] || fromKeys[n.Name] != per[n.Name] {
			t.Errorf("node %s: %d sandboxes listed through the cache, %d from the slot keys, %d records", n.Name, n.Status.Sandboxes, fromKeys[n.Name], per[n.Name])
		}
	}
}

// A node's sandbox maximums are in its registration, and placement skips a
// node a sandbox asks too much of: the create is refused, naming the field
// and the flag, only when no node fits, and then nothing is written.
func TestPlacementHonoursNodeMaximums(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	reg := func(name string, cpu, mem int64) clientv3.LeaseID {
		l, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		n := &shoalv1.Node{Name: name, Address: name + ":7443", MaxCpuMillis: cpu, MaxMemoryBytes: mem}
		if err := s.RegisterNode(ctx, store.Registration{Node: n, Instance: name}, l.ID); err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	reg("small", 500, 256<<20)
	big := reg("big", 0, 0)
	withRes := func(name string, cpu, mem int64) *shoalv1.Sandbox {
		sb := sandbox(name)
		sb.Spec.Resources = &shoalv1.Resources{CpuMillis: cpu, MemoryBytes: mem}
		return sb
	}
	for i := range 6 {
		sb, err := s.CreateSandboxOn(ctx, withRes(fmt.Sprintf("heavy-%d", i), 1000, 0), store.Placement{}, "")
		if err != nil || sb.Spec.Node != "big" {
			t.Fatalf("1000 millicores with small's maximum at 500: %v, placed on %q", err, sb.GetSpec().GetNode())
		}
	}
	small := 0
	for i := range 6 {
		sb, err := s.CreateSandboxOn(ctx, withRes(fmt.Sprintf("light-%d", i), 500, 256<<20), store.Placement{}, "")
		if err != nil {
			t.Fatalf("within every maximum: %v", err)
		}
		if sb.Spec.Node == "small" {
			small++
		}
	}
	if small == 0 {
		t.Fatal("no sandbox within small's maximums was placed there (it held none, big held 6)")
	}
	_, err := s.CreateSandboxOn(ctx, withRes("pinned", 0, 512<<20), store.Placement{Node: "small"}, "")
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition ||
		!strings.Contains(msg, "sandbox.spec.resources.memory_bytes") || !strings.Contains(msg, "--sandbox-max-memory-mib") {
		t.Fatalf("512 MiB pinned to a node allowing 256: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "default", "pinned"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("a refused create left a record: %v", err)
	}
	if _, err := c.Revoke(ctx, big); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateSandboxOn(ctx, withRes("too-big", 2000, 0), store.Placement{}, "")
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(msg, "no node fits") ||
		!strings.Contains(msg, "small allows sandbox.spec.resources.cpu_millis up to 500") || !strings.Contains(msg, "big not ready") {
		t.Fatalf("2000 millicores with big gone: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "default", "too-big"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("a refused create left a record: %v", err)
	}
}

// What a node's engine has is in its registration too: placement skips a
// node whose engine a sandbox asks more of, and Candidates (the API's
// advice before a create) names the nodes the create could go to.
func TestPlacementHonoursEngineCapacity(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	for _, n := range []*shoalv1.Node{
		{Name: "two", Address: "two:7443", EngineCpuMillis: 2000, EngineMemoryBytes: 4 << 30},
		{Name: "eight", Address: "eight:7443", EngineCpuMillis: 8000, EngineMemoryBytes: 16 << 30},
		{Name: "unknown", Address: "unknown:7443", Labels: map[string]string{"zone": "b"}}, // its engine did not answer
	} {
		l, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterNode(ctx, store.Registration{Node: n, Instance: n.Name}, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	withCPU := func(name string, cpu int64) *shoalv1.Sandbox {
		sb := sandbox(name)
		sb.Spec.Resources = &shoalv1.Resources{CpuMillis: cpu}
		return sb
	}
	for _, tc := range []struct {
		cpu  int64
		sel  map[string]string
		want []string
	}{
		{1000, nil, []string{"eight", "two", "unknown"}},
		{4000, nil, []string{"eight", "unknown"}},
		{4000, map[string]string{"zone": "b"}, []string{"unknown"}},
	} {
		got, err := s.Candidates(ctx, store.Placement{Selector: tc.sel}, withCPU("x", tc.cpu))
		slices.Sort(got)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("candidates for %d millicores, selector %v: %v %v, want %v", tc.cpu, tc.sel, got, err, tc.want)
		}
	}
	for i := range 4 {
		sb, err := s.CreateSandboxOn(ctx, withCPU(fmt.Sprintf("big-%d", i), 4000), store.Placement{}, "")
		if err != nil || sb.Spec.Node == "two" {
			t.Fatalf("4000 millicores with two's engine at 2 CPUs: %v, placed on %q", err, sb.GetSpec().GetNode())
		}
	}
	_, err := s.CreateSandboxOn(ctx, withCPU("pinned", 3000), store.Placement{Node: "two"}, "")
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition ||
		!strings.Contains(msg, "two's engine has 2 CPUs: sandbox.spec.resources.cpu_millis up to 2000, not 3000") {
		t.Fatalf("3000 millicores pinned to a 2-CPU engine: %v", err)
	}
	sb := sandbox("huge")
	sb.Spec.Resources = &shoalv1.Resources{MemoryBytes: 32 << 30}
	_, err = s.Candidates(ctx, store.Placement{Selector: map[string]string{"zone": "a"}}, sb)
	if msg := fmt.Sprint(err); shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(msg, "no node fits") ||
		!strings.Contains(msg, "eight's engine has 17179869184 bytes of memory") || !strings.Contains(msg, "unknown lacks label zone=a") {
		t.Fatalf("candidates for 32 GiB in zone a: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "default", "pinned"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("a refused create left a record: %v", err)
	}
}

// A node id belongs to one installation (Registration.Instance). With the
// node NotReady (its lease revoked), another installation is refused with
// ErrNodeIDTaken (ALREADY_EXISTS) naming the way out, and nothing is
// written; the same installation takes its id back; Replace takes it over,
// after which the replaced installation is refused in turn; while `shoal
// node remove` is under way the refusal says so, and once the node is
// forgotten anyone may have the id. A live node's id is refused to another
// installation, Replace or not.
func TestRegistrationBelongsToItsInstallation(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	reg := func(instance string, replace bool) (clientv3.LeaseID, error) {
		t.Helper()
		l, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID, s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: instance + ":7443"}, Instance: instance, Replace: replace}, l.ID)
	}
	down := func(l clientv3.LeaseID) {
		t.Helper()
		if _, err := c.Revoke(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	address := func() string {
		t.Helper()
		n, err := s.GetNode(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return n.Address
	}
	refused := func(err error, want ...string) {
		t.Helper()
		if !errors.Is(err, store.ErrNodeIDTaken) || shoal.KindOf(err) != shoal.KindAlreadyExists || !errors.Is(err, shoal.ErrAlreadyExists) ||
			status.Code(shoal.GRPCStatus(err)) != codes.AlreadyExists {
			t.Fatalf("%v: want ErrNodeIDTaken of kind ALREADY_EXISTS", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%v: want it to say %q", err, w)
			}
		}
	}

	first, err := reg("a", false)
	if err != nil {
		t.Fatal(err)
	}
	// Live: refused to another installation, even with Replace.
	_, err = reg("b", true)
	refused(err, "held by a live node at a:7443")
	down(first)
	_, err = reg("b", false)
	refused(err, `node id "n1" belongs to another installation (NotReady, last at a:7443`, "shoal node remove n1", "--replace-node")
	if got := address(); got != "a:7443" {
		t.Fatalf("a refused registration wrote the registry: address %s", got)
	}
	again, err := reg("a", false)
	if err != nil {
		t.Fatalf("the same installation, restarted: %v", err)
	}
	down(again)
	replacing, err := reg("b", true)
	if err != nil {
		t.Fatalf("another installation with Replace: %v", err)
	}
	if got := address(); got != "b:7443" {
		t.Fatalf("after the replacement the registry says %s", got)
	}
	down(replacing)
	_, err = reg("a", false)
	refused(err, "last at b:7443")

	// Removal under way (the node has sandboxes to delete first), then
	// done.
	if _, err := s.CreateSandboxOn(ctx, sandbox("on-n1"), store.Placement{Node: "n1"}, ""); err == nil {
		t.Fatal("placed on a NotReady node")
	}
	if err := s.ForgetNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	_, err = reg("c", false)
	refused(err, "`shoal node remove n1` is removing", "--replace-node")
	if gone, _, err := s.CompleteForget(ctx, "n1", nil); err != nil || !gone {
		t.Fatalf("CompleteForget: %v %v", gone, err)
	}
	if _, err := reg("c", false); err != nil {
		t.Fatalf("a new installation once the node was removed: %v", err)
	}
}

// A registry record that does not decode is listed by the id in its key,
// with status.corrupt naming the key; a corrupt registry key is no Ready
// node (placement skips it, saying why), blocks its id's registration with
// an error naming the record, and ForgetNode deletes it at once; a corrupt
// info record is forgotten as a NotReady node is.
func TestCorruptNodeRecords(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	ctx := ctxT(t)
	register(t, s, c, "good", 0, nil)
	garbage := "\x0a\xff\xff\xff\xff garbage"
	for _, k := range []string{"/shoal/nodes/wreck", "/shoal/nodeinfo/ghost"} {
		if _, err := c.Put(ctx, k, garbage); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := s.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*shoalv1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for name, key := range map[string]string{"wreck": "/shoal/nodes/wreck", "ghost": "/shoal/nodeinfo/ghost"} {
		n := byName[name]
		if n == nil || n.Status.Ready || !strings.Contains(n.Status.Corrupt, key) {
			t.Fatalf("node %s: %v; want listed, not Ready, corrupt naming %s", name, n, key)
		}
	}
	if g := byName["good"]; g == nil || !g.Status.Ready || g.Status.Corrupt != "" {
		t.Fatalf("the good node: %v", g)
	}
	if n, err := s.GetNode(ctx, "wreck"); err != nil || n.Status.Corrupt == "" {
		t.Fatalf("get the corrupt node: %v %v", n, err)
	}
	_, err = s.CreateSandboxOn(ctx, sandbox("pinned"), store.Placement{Node: "wreck"}, "")
	if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "wreck's registry record is corrupt") {
		t.Fatalf("a sandbox pinned to the corrupt node: %v", err)
	}
	l, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	err = s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "wreck", Address: "wreck:7443"}, Instance: "wreck"}, l.ID)
	if err == nil || !strings.Contains(err.Error(), "/shoal/nodes/wreck") || !strings.Contains(err.Error(), "shoal node remove wreck") {
		t.Fatalf("registering over a corrupt registry key: %v", err)
	}
	if err := s.ForgetNode(ctx, "wreck"); err != nil {
		t.Fatalf("forget the corrupt registration: %v", err)
	}
	if _, err := s.GetNode(ctx, "wreck"); shoal.KindOf(err) != shoal.KindNotFound {
		t.Fatalf("the corrupt registration after ForgetNode: %v", err)
	}
	if err := s.ForgetNode(ctx, "ghost"); err != nil {
		t.Fatalf("forget the corrupt info record: %v", err)
	}
	if gone, _, err := s.CompleteForget(ctx, "ghost", nil); err != nil || !gone {
		t.Fatalf("complete forgetting the corrupt info record: %v %v", gone, err)
	}
	if n := placed(t, s); len(n) != 1 {
		t.Fatalf("nodes left: %v; want only good", n)
	}
	if err := s.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "wreck", Address: "wreck:7443"}, Instance: "wreck"}, l.ID); err != nil {
		t.Fatalf("registering once the corrupt key is gone: %v", err)
	}
}
