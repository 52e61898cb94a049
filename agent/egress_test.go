package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/store"
)

// cuttableLease is the node's real lease, except that a test can make it
// say "not held", as a node cut off from etcd finds.
type cuttableLease struct {
	agent.Lease
	cut atomic.Bool
}

func (l *cuttableLease) State() (bool, uint64) {
	held, gen := l.Lease.State()
	return held && !l.cut.Load(), gen
}

// The agent serves a sandbox with rules on a socket of its own, with a
// sidecar, and reports the version applied; a policy change is in force
// for the next connection; while the node does not hold its lease (it is
// fenced, and freezes its containers) no connection is admitted, and
// admission resumes when it holds it again; a sandbox left with no rules
// loses its socket and sidecar.
func TestEgressFollowsThePolicyAndTheLease(t *testing.T) {
	testenv.RequireDocker(t)
	cli, _ := testenv.Etcd(t)
	st := store.New(cli, store.Options{})
	node := fmt.Sprintf("eg%x", time.Now().UnixNano())[:14]
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{Node: node, Cluster: "agenttest"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	reg := register(ctx, t, st, cli, node)
	lease := &cuttableLease{Lease: reg}
	dir := t.TempDir()
	defer run(ctx, t, reg, agent.Config{Node: node, Store: st, Runtime: rt, Lease: lease, Resync: 200 * time.Millisecond,
		Egress: &agent.EgressConfig{Dir: dir, Runtime: rt}})()

	// The upstream: an HTTP server on a host address, as a site on the
	// internet would be.
	host := testenv.HostAddr(t)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	port := ln.Addr().(*net.TCPAddr).Port
	url := "http://" + net.JoinHostPort(host.String(), strconv.Itoa(port)) + "/"
	rule := &shoalv1.EgressRule{Host: host.String(), Ports: []uint32{uint32(port)}}

	sb, err := st.CreateSandbox(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "eg"},
		Spec:   &shoalv1.SandboxSpec{Image: docker.DefaultImage, Egress: &shoalv1.EgressPolicy{Version: 1, Rules: []*shoalv1.EgressRule{rule}}},
		Status: &shoalv1.SandboxStatus{Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	applied := func(v int64) {
		t.Helper()
		testenv.Eventually(t, time.Minute, fmt.Sprintf("policy version %d applied", v), func() (bool, error) {
			sb, err := st.GetSandbox(ctx, "default", "eg")
			return err == nil && sb.GetStatus().GetEgressAppliedVersion() == v, err
		})
	}
	applied(1)
	socket := filepath.Join(dir, sb.Meta.Uid, "s")
	if code, body := testenv.SocketGet(t, socket, url); code != http.StatusOK || body != "upstream" {
		t.Fatalf("an allowed request: %d %q", code, body)
	}
	if uids, err := rt.EgressSidecars(ctx); err != nil || len(uids) != 1 || uids[0] != sb.Meta.Uid {
		t.Fatalf("sidecars: %v, %v; want the sandbox's one", uids, err)
	}

	// Fenced: refused at once, whatever the policy says.
	lease.cut.Store(true)
	if code, body := testenv.SocketGet(t, socket, url); code != http.StatusServiceUnavailable {
		t.Errorf("a request while the node does not hold its lease: %d %q; want 503", code, body)
	}
	lease.cut.Store(false)
	testenv.Eventually(t, time.Minute, "admission once the lease is held again", func() bool {
		code, _ := testenv.SocketGet(t, socket, url)
		return code == http.StatusOK
	})

	// A policy change: in force for the next connection.
	if _, err := st.UpdateSandbox(ctx, "default", "eg", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Spec.Egress = &shoalv1.EgressPolicy{Version: 2, Rules: []*shoalv1.EgressRule{{Host: host.String(), Ports: []uint32{1}}}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := testenv.SocketGet(t, socket, url); code != http.StatusForbidden {
		t.Errorf("a request right after its rule was replaced: %d %q; want 403", code, body)
	}
	applied(2)

	// No rules: no socket, no sidecar.
	if _, err := st.UpdateSandbox(ctx, "default", "eg", store.Preconditions{}, func(sb *shoalv1.Sandbox) error {
		sb.Spec.Egress = &shoalv1.EgressPolicy{Version: 3}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	applied(3)
	uids, err := rt.EgressSidecars(ctx)
	if err != nil || len(uids) != 0 {
		t.Errorf("sidecars once the sandbox has no rules: %v, %v; want none", uids, err)
	}
	if c, err := testenv.DialUnix(socket, time.Second); err == nil {
		c.Close()
		t.Errorf("the socket still answers once the sandbox has no rules")
	}
}
