package apiclient_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiclient"
)

// fakeNode is an in-process Shoal server: a cut-off one refuses everything
// not-applied; a broken one fails writes ambiguously (plain UNAVAILABLE);
// a good one answers with its name.
type fakeNode struct {
	shoalv1.UnimplementedShoalServer
	name  string
	mode  string // "cut", "broken" or "good"
	calls atomic.Int32
}

func (n *fakeNode) fail() error {
	n.calls.Add(1)
	switch n.mode {
	case "cut":
		return shoal.GRPCStatus(shoal.NotApplied(shoal.Unavailable("node %s cannot reach etcd", n.name)))
	case "broken":
		return status.Error(codes.Unavailable, "etcd: leader changed")
	}
	return nil
}

func (n *fakeNode) GetProvider(context.Context, *shoalv1.GetProviderRequest) (*shoalv1.Provider, error) {
	if err := n.fail(); err != nil {
		return nil, err
	}
	return &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: n.name}}, nil
}

func (n *fakeNode) UpdateProvider(context.Context, *shoalv1.UpdateProviderRequest) (*shoalv1.Provider, error) {
	if err := n.fail(); err != nil {
		return nil, err
	}
	return &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: n.name}}, nil
}

func (n *fakeNode) Exec(req *shoalv1.ExecRequest, st grpc.ServerStreamingServer[shoalv1.ExecChunk]) error {
	if err := n.fail(); err != nil {
		return err
	}
	return st.Send(&shoalv1.ExecChunk{Data: []byte(n.name + ":" + req.Name)})
}

func serve(t *testing.T, n *fakeNode) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	shoalv1.RegisterShoalServer(gs, n)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func client(t *testing.T, addrs ...string) shoalv1.ShoalClient {
	t.Helper()
	c, err := apiclient.Dial(addrs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return shoalv1.NewShoalClient(c)
}

func TestFailoverMovesOnOnlyWhenNothingWasDone(t *testing.T) {
	ctx := context.Background()
	cut, broken, good := &fakeNode{name: "cut", mode: "cut"}, &fakeNode{name: "broken", mode: "broken"}, &fakeNode{name: "good", mode: "good"}
	cutA, brokenA, goodA, dead := serve(t, cut), serve(t, broken), serve(t, good), deadAddr(t)

	// Not applied, or never sent: any call moves on, writes included.
	cl := client(t, cutA, dead, goodA)
	p, err := cl.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{})
	if err != nil || p.Meta.Name != "good" {
		t.Fatalf("update past a cut-off and a dead node: %v, %v", p, err)
	}
	// The node that answered is asked first from then on.
	before := cut.calls.Load()
	if p, err = cl.GetProvider(ctx, &shoalv1.GetProviderRequest{}); err != nil || p.Meta.Name != "good" || cut.calls.Load() != before {
		t.Fatalf("next call: %v, %v, cut node asked %d more times", p, err, cut.calls.Load()-before)
	}

	// A write that may have been applied is not sent again; a read is.
	cl = client(t, brokenA, goodA)
	before = good.calls.Load()
	if _, err := cl.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{}); status.Code(err) != codes.Unavailable || good.calls.Load() != before {
		t.Fatalf("ambiguous write: %v, the good node got %d calls; want UNAVAILABLE and none", err, good.calls.Load()-before)
	}
	if p, err := cl.GetProvider(ctx, &shoalv1.GetProviderRequest{}); err != nil || p.Meta.Name != "good" {
		t.Fatalf("read past a broken node: %v, %v", p, err)
	}
	// Unless the caller vouches it may be sent twice.
	cl = client(t, brokenA, goodA)
	if p, err := cl.UpdateProvider(apiclient.Resendable(ctx), &shoalv1.UpdateProviderRequest{}); err != nil || p.Meta.Name != "good" {
		t.Fatalf("resendable write past a broken node: %v, %v", p, err)
	}

	// A stream starts over on the next node until its first message.
	cl = client(t, cutA, goodA)
	st, err := cl.Exec(ctx, &shoalv1.ExecRequest{Name: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := st.Recv()
	if err != nil || string(ch.Data) != "good:sb" {
		t.Fatalf("exec past a cut-off node: %v, %v", ch, err)
	}

	// Every node refusing: the last error, marked not-applied.
	cl = client(t, cutA, dead)
	if _, err := cl.GetProvider(ctx, &shoalv1.GetProviderRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("all nodes refusing: %v", err)
	}
}
