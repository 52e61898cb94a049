package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/internal/testenv"
	"shoal/node"
)

// member is an in-process node of a multi-member test cluster.
type member struct {
	*node.Node
	cfg    node.Config
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop ends the node and returns what Run returned.
func (m *member) stop(t *testing.T) error {
	t.Helper()
	m.once.Do(func() {
		m.cancel()
		select {
		case m.err = <-m.done:
		case <-time.After(time.Minute):
			m.err = fmt.Errorf("node %s did not stop within a minute", m.cfg.ID)
		}
	})
	return m.err
}

// exited waits for a node to stop on its own and returns its Run error.
func (m *member) exited(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-m.done:
		m.once.Do(func() { m.err = err })
		return err
	case <-time.After(within):
		t.Fatalf("node %s still runs after %s", m.cfg.ID, within)
		return nil
	}
}

// startMembers starts the nodes at once (the voters of a new cluster wait
// for each other) and waits until every one serves. They are stopped, and
// their containers removed, when the test ends.
func startMembers(t *testing.T, cfgs ...node.Config) []*member {
	t.Helper()
	ms := make([]*member, len(cfgs))
	for i, cfg := range cfgs {
		buf := &syncBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		m := &member{Node: n, cfg: cfg, log: buf, cancel: cancel, done: make(chan error, 1)}
		go func() { m.done <- n.Run(ctx) }()
		ms[i] = m
		t.Cleanup(func() { testenv.RemoveNodeContainers(t, cfg.ID) })
	}
	t.Cleanup(func() {
		// All at once: one by one, the last ones would wait out lost quorum.
		for _, m := range ms {
			m.cancel()
		}
		for _, m := range ms {
			if err := m.stop(t); err != nil {
				t.Logf("node %s: %v", m.cfg.ID, err)
			}
		}
	})
	deadline := time.After(90 * time.Second)
	for _, m := range ms {
		select {
		case <-m.Ready():
		case err := <-m.done:
			m.once.Do(func() { m.err = err })
			t.Fatalf("node %s did not start: %v\n%s", m.cfg.ID, err, m.log)
		case <-deadline:
			t.Fatalf("node %s did not serve within 90s\n%s", m.cfg.ID, m.log)
		}
	}
	return ms
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// memberConfig is a test node config whose id says which member it is.
func memberConfig(t *testing.T, name string) node.Config {
	cfg := testenv.NodeConfig(t)
	cfg.ID += "-" + name
	return cfg
}

func clientConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func clusterStatus(t *testing.T, bin, ep string) (*shoalv1.ClusterStatus, error) {
	t.Helper()
	r := run(t, bin, ep, "cluster", "status", "-o", "json")
	if r.code != 0 {
		return nil, fmt.Errorf("exit %d: %s", r.code, r.stderr)
	}
	st := &shoalv1.ClusterStatus{}
	if err := protojson.Unmarshal([]byte(r.stdout), st); err != nil {
		t.Fatalf("cluster status -o json: %v\n%s", err, r.stdout)
	}
	return st, nil
}

func memberList(t *testing.T, bin, ep string) []*shoalv1.Member {
	t.Helper()
	r := run(t, bin, ep, "cluster", "member", "list", "-o", "json").must(t, 0, "cluster member list")
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("member list -o json: %v\n%s", err, r.stdout)
	}
	ms := make([]*shoalv1.Member, len(list.Items))
	for i, raw := range list.Items {
		ms[i] = &shoalv1.Member{}
		if err := protojson.Unmarshal(raw, ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

// voters counts the voting members, by name.
func voters(ms []*shoalv1.Member) map[string]bool {
	v := map[string]bool{}
	for _, m := range ms {
		if !m.Learner {
			v[m.Name] = true
		}
	}
	return v
}

// Three voters bootstrapped with --etcd-initial-cluster, a fourth that
// joins through a node's API (a learner, then promoted) and restarts
// without adding itself again, its removal, and the API through the rest
// after one voter stops (2 of 3 is a quorum).
func TestEtcdClusterMembership(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	var cfgs []node.Config
	var ic []string
	for _, name := range []string{"a", "b", "c"} {
		cfg := memberConfig(t, name)
		cfgs = append(cfgs, cfg)
		ic = append(ic, cfg.ID+"="+cfg.EtcdListenPeer)
	}
	for i := range cfgs {
		cfgs[i].EtcdInitialCluster = strings.Join(ic, ",")
	}
	ms := startMembers(t, cfgs...)
	ids := map[string]bool{cfgs[0].ID: true, cfgs[1].ID: true, cfgs[2].ID: true}

	// Members publish themselves as they start; shoal's leader records
	// its term once elected.
	var st *shoalv1.ClusterStatus
	testenv.Eventually(t, time.Minute, "3 healthy members, one leader, shoal's leader known", func() (bool, error) {
		var err error
		if st, err = clusterStatus(t, bin, ms[0].Addr()); err != nil {
			return false, err
		}
		leaders, healthy := 0, 0
		for _, m := range st.Members {
			if m.Leader {
				leaders++
			}
			if m.Healthy && ids[m.Name] && !m.Learner && m.RaftTerm > 0 {
				healthy++
			}
		}
		return len(st.Members) == 3 && healthy == 3 && leaders == 1 && ids[st.LeaderNode] && st.FencingToken > 0 && st.LeaderSince != nil,
			fmt.Errorf("status %v", st)
	})
	// The table says the same.
	r := run(t, bin, ms[1].Addr(), "cluster", "status").must(t, 0, "cluster status")
	for id := range ids {
		if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "shoal leader: "+st.LeaderNode) {
			t.Fatalf("cluster status table lacks %s or the leader:\n%s", id, r.stdout)
		}
	}

	// AddMember is idempotent for a retried join, and refuses a name
	// taken by other peer URLs. (A member added and never started.)
	cc := shoalv1.NewClusterClient(clientConn(t, ms[0].Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Not a FreePort: a port never listened on can be handed out again,
	// to the member that joins below, whose peer URL would then match
	// the ghost's (seen in CI: the join took the removed ghost for itself).
	ghostURL := "http://127.0.0.254:2380"
	add1, err := cc.AddMember(ctx, &shoalv1.AddMemberRequest{Name: "ghost", PeerUrls: []string{ghostURL}})
	if err != nil {
		t.Fatal(err)
	}
	add2, err := cc.AddMember(ctx, &shoalv1.AddMemberRequest{Name: "ghost", PeerUrls: []string{ghostURL}})
	if err != nil || add2.Member.Id != add1.Member.Id || !add1.Member.Learner || !strings.Contains(add1.InitialCluster, "ghost="+ghostURL) {
		t.Fatalf("second add of the same member: %v, %v (first %v)", add2, err, add1)
	}
	run(t, bin, ms[0].Addr(), "cluster", "member", "add", "ghost", "--peer-url", "http://127.0.0.1:1").must(t, cli.ExitPrecondition, "add a taken name")
	run(t, bin, ms[0].Addr(), "cluster", "member", "remove", add1.Member.Id).must(t, 0, "remove the unstarted member by hex id")
	run(t, bin, ms[0].Addr(), "cluster", "member", "remove", "nosuch").must(t, cli.ExitNotFound, "remove a missing member")

	// A fourth node joins through node b's API.
	cfg4 := memberConfig(t, "d")
	cfg4.Join = ms[1].Addr()
	d := startMembers(t, cfg4)[0]
	if log := d.log.String(); !strings.Contains(log, "etcd member added as a learner") || !strings.Contains(log, "etcd member promoted to voter") {
		t.Fatalf("the joining node's log shows no learner then promotion:\n%s", log)
	}
	if v := voters(memberList(t, bin, ms[2].Addr())); len(v) != 4 || !v[cfg4.ID] {
		t.Fatalf("after the join, voters are %v; want the 3 and %s", v, cfg4.ID)
	}

	// A worker joins with --etcd-endpoints (its first endpoint one that
	// is down: any voter that answers will do); node list shows all five
	// nodes Ready, cluster status the four members and no more.
	wcfg := memberConfig(t, "w")
	wcfg.EtcdEndpoints = []string{fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), cfgs[0].EtcdListenClient, cfgs[1].EtcdListenClient}
	w := startMembers(t, wcfg)[0]
	testenv.Eventually(t, 30*time.Second, "node list shows the 3 voters, the joined node and the worker Ready", func() (bool, error) {
		r := run(t, bin, w.Addr(), "node", "list")
		for _, id := range []string{cfgs[0].ID, cfgs[1].ID, cfgs[2].ID, cfg4.ID, wcfg.ID} {
			if !strings.Contains(r.stdout, id+" ") || strings.Count(r.stdout, "NotReady") > 0 {
				return false, fmt.Errorf("%s", r.stdout)
			}
		}
		return true, nil
	})
	if st, err := clusterStatus(t, bin, w.Addr()); err != nil || len(st.Members) != 4 {
		t.Fatalf("cluster status through the worker: %v, %v; want the 4 members (a worker is none)", st, err)
	}
	if err := w.stop(t); err != nil {
		t.Fatalf("stop the worker: %v", err)
	}

	// Restarted on its data dir with the same flags, it is the same member.
	if err := d.stop(t); err != nil {
		t.Fatalf("stop the joined node: %v", err)
	}
	d = startMembers(t, cfg4)[0]
	if strings.Contains(d.log.String(), "added as a learner") {
		t.Fatalf("the restarted node added itself again:\n%s", d.log)
	}
	if ml := memberList(t, bin, d.Addr()); len(ml) != 4 || len(voters(ml)) != 4 {
		t.Fatalf("after the restart, members are %v", ml)
	}

	// Removed, the member stops its node, which says what to do.
	run(t, bin, ms[0].Addr(), "cluster", "member", "remove", cfg4.ID).must(t, 0, "cluster member remove")
	if err := d.exited(t, time.Minute); err == nil || !strings.Contains(err.Error(), "removed from the cluster") || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("the removed member's node: %v", err)
	}
	if v := voters(memberList(t, bin, ms[0].Addr())); len(v) != 3 || v[cfg4.ID] {
		t.Fatalf("after the removal, voters are %v", v)
	}

	// One voter of three stops: the other two are a quorum.
	if err := ms[2].stop(t); err != nil {
		t.Fatalf("stop node c: %v", err)
	}
	run(t, bin, ms[0].Addr(), "provider", "create", "after-loss", "--type", "generic", "--credential", "K=V").must(t, 0, "provider create with 2 of 3")
	testenv.Eventually(t, time.Minute, "node b lists the provider and sees c down", func() (bool, error) {
		r := run(t, bin, ms[1].Addr(), "provider", "list")
		if r.code != 0 || !strings.Contains(r.stdout, "after-loss") {
			return false, fmt.Errorf("provider list: exit %d %s %s", r.code, r.stdout, r.stderr)
		}
		st, err := clusterStatus(t, bin, ms[1].Addr())
		if err != nil {
			return false, err
		}
		down := 0
		for _, m := range st.Members {
			if !m.Healthy && m.Name == cfgs[2].ID && m.Error != "" {
				down++
			}
		}
		return down == 1 && ids[st.LeaderNode] && st.LeaderNode != cfgs[2].ID, fmt.Errorf("status %v", st)
	})

	// With the quorum gone, status still answers: that is when it matters.
	if err := ms[1].stop(t); err != nil {
		t.Logf("stop node b: %v", err)
	}
	// (Node a's member notices the lost quorum within an election timeout.)
	testenv.Eventually(t, time.Minute, "status without a quorum: 3 members, none healthy", func() (bool, error) {
		st, err := clusterStatus(t, bin, ms[0].Addr())
		if err != nil {
			return false, err
		}
		for _, m := range st.Members {
			if m.Healthy {
				return false, fmt.Errorf("member %s reads as healthy: %v", m.Name, m)
			}
		}
		return len(st.Members) == 3, fmt.Errorf("status %v", st)
	})
}

// A snapshot saved through a node's API restores into a fresh data dir
// with etcd's own tools, and a node started on it serves every record.
func TestSnapshotSaveAndRestore(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()
	run(t, bin, ep, "provider", "create", "keys", "--type", "generic", "--credential", "TOKEN=secret").must(t, 0, "provider create")
	run(t, bin, ep, "sandbox", "create", "agent", "--provider", "keys", "--label", "team=ml").must(t, 0, "sandbox create")
	run(t, bin, ep, "-w", "other", "provider", "create", "gh", "--type", "github", "--credential", "GH=x").must(t, 0, "provider create in another workspace")

	file := filepath.Join(t.TempDir(), "shoal.snap")
	r := run(t, bin, ep, "cluster", "snapshot", "save", file, "-o", "json").must(t, 0, "snapshot save")
	var saved struct {
		File  string
		Bytes float64
	}
	if err := json.Unmarshal([]byte(r.stdout), &saved); err != nil || saved.File != file || saved.Bytes < 4096 {
		t.Fatalf("snapshot save printed %q (%v)", r.stdout, err)
	}

	cfg := testenv.NodeConfig(t)
	cfg.ID += "-restored"
	r = run(t, bin, "", "cluster", "snapshot", "restore", file, "--data-dir", cfg.DataDir, "--node-id", cfg.ID,
		"--etcd-initial-cluster", cfg.ID+"="+cfg.EtcdListenPeer).must(t, 0, "snapshot restore")
	if !strings.Contains(r.stdout, "shoal node start --data-dir "+cfg.DataDir+" --node-id "+cfg.ID) {
		t.Fatalf("restore does not say how to start the node:\n%s", r.stdout)
	}
	run(t, bin, "", "cluster", "snapshot", "restore", file, "--data-dir", cfg.DataDir, "--node-id", cfg.ID,
		"--etcd-initial-cluster", cfg.ID+"="+cfg.EtcdListenPeer).must(t, cli.ExitPrecondition, "restore over a restored dir")

	restored := testenv.StartNode(t, cfg)
	rep := restored.Addr()
	r = run(t, bin, rep, "sandbox", "list", "--selector", "team=ml").must(t, 0, "sandbox list on the restored node")
	if !strings.Contains(r.stdout, "agent") || !strings.Contains(r.stdout, "keys") {
		t.Fatalf("restored node lacks the sandbox:\n%s", r.stdout)
	}
	r = run(t, bin, rep, "provider", "get", "keys", "-o", "json").must(t, 0, "provider get on the restored node")
	if !strings.Contains(r.stdout, "TOKEN") {
		t.Fatalf("restored provider: %s", r.stdout)
	}
	run(t, bin, rep, "-w", "other", "provider", "get", "gh").must(t, 0, "provider of another workspace on the restored node")
	if restored.ClusterID() != n.ClusterID() {
		t.Fatalf("restored cluster id %q, want %q", restored.ClusterID(), n.ClusterID())
	}

	// The restored node is the cluster's only voter: it cannot be removed.
	r = run(t, bin, rep, "cluster", "member", "remove", cfg.ID).must(t, cli.ExitPrecondition, "remove the last voter")
	if !strings.Contains(r.stderr, "last voting member") {
		t.Fatalf("removing the last voter: %s", r.stderr)
	}
	// Promoting a voter changes nothing.
	run(t, bin, rep, "cluster", "member", "promote", cfg.ID).must(t, 0, "promote a voter")
}

// Bad cluster flags: exit 2 and one error line naming the flag, before
// anything starts.
func TestClusterBadFlagsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	dir := t.TempDir()
	snap := writeFile(t, filepath.Join(dir, "snap.db"), "not a snapshot")
	// --insecure: these cases are about the URLs themselves, not about
	// serving plaintext beyond loopback (the cases after them).
	start := []string{"node", "start", "--node-id", "n1", "--data-dir", filepath.Join(dir, "data"), "--insecure"}
	plain := start[:len(start)-1]
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{append(plain, "--listen", "0.0.0.0:7443"), "--listen"},
		{append(plain, "--advertise", "10.1.1.1:7443"), "--advertise"},
		{append(plain, "--etcd-listen-peer", "http://10.1.1.1:2380"), "--etcd-listen-peer"},
		{append(plain, "--tls-cert", snap), "--tls-key"},
		{append(plain, "--tls-cert", snap, "--tls-key", snap, "--tls-ca", snap), "--tls-cert"},
		{append(start, "--etcd-initial-cluster", "n1"), "--etcd-initial-cluster"},
		{append(start, "--etcd-initial-cluster", "n1=127.0.0.1:2380"), "--etcd-initial-cluster"},
		{append(start, "--etcd-initial-cluster", "n2=http://127.0.0.1:2380,n3=http://127.0.0.1:2381"), "--etcd-initial-cluster"},
		{append(start, "--etcd-initial-cluster", "n1=http://10.1.1.1:2380"), "--etcd-initial-cluster"},
		{append(start, "--etcd-initial-cluster-state", "old"), "--etcd-initial-cluster-state"},
		{append(start, "--etcd-advertise-client", "http://0.0.0.0:2379"), "--etcd-advertise-client"},
		{append(start, "--etcd-advertise-peer", "peer:2380"), "--etcd-advertise-peer"},
		{append(start, "--etcd-listen-peer", "http://0.0.0.0:2380"), "--etcd-advertise-peer"},
		{append(start, "--etcd-listen-client", "http://[::]:2379"), "--etcd-advertise-client"},
		{append(start, "--join", "127.0.0.1:7443", "--etcd-initial-cluster", "n1=http://127.0.0.1:2380"), "--join"},
		{append(start, "--join", "127.0.0.1:7443", "--etcd-endpoints", "http://127.0.0.1:2379"), "--join"},
		{append(start, "--join", "no-port"), "--join"},
		{append(start, "--join", "127.0.0.1:7443", "--etcd-initial-cluster-state", "new"), "--etcd-initial-cluster-state"},
		{append(start, "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-initial-cluster", "n1=http://127.0.0.1:2380"), "--etcd-initial-cluster"},
		{append(start, "--etcd-endpoints", "ftp://x:1"), "--etcd-endpoints"},
		{[]string{"node", "start", "--node-id", "a=b", "--data-dir", dir}, "--node-id"},
		{[]string{"cluster", "member", "add", "n4", "--peer-url", "http://0.0.0.0"}, "--peer-url"},
		{[]string{"cluster", "member", "add", "n4"}, "peer-url"},
		{[]string{"cluster", "member", "remove"}, "NAME"},
		{[]string{"cluster", "snapshot", "save"}, "FILE"},
		{[]string{"cluster", "snapshot", "restore", snap}, "data-dir"},
		{[]string{"cluster", "snapshot", "restore", filepath.Join(dir, "missing.db"), "--data-dir", dir}, "snapshot file"},
		{[]string{"cluster", "snapshot", "restore", snap, "--data-dir", dir, "--node-id", "n1", "--etcd-initial-cluster", "n2=http://127.0.0.1:2380"}, "--etcd-initial-cluster"},
		{[]string{"cluster", "snapshot", "restore", snap, "--data-dir", dir, "--node-id", "a,b"}, "--node-id"},
	} {
		r := run(t, bin, "127.0.0.1:1", tc.args...)
		errLines := grepLines(r.stderr, "Error:")
		if r.code != cli.ExitUsage || len(errLines) != 1 || !strings.Contains(errLines[0], tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one error line naming %s", tc.args, r.code, r.stderr, cli.ExitUsage, tc.flag)
		}
	}
}
