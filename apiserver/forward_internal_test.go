package apiserver

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"shoal"
)

// brokenStream is a forwarded stream that ends at once with err, the
// trailer it got with it.
type brokenStream struct {
	err     error
	trailer metadata.MD
}

func (b brokenStream) Recv() (int, error)   { return 0, b.err }
func (b brokenStream) Trailer() metadata.MD { return b.trailer }

// A forwarded stream that breaks without the owner's answer is reported
// as the owner's going away, by name; what the owner answered itself, or
// a break after the caller left, is passed on as it came.
func TestRelayNamesAnOwnerThatWentAway(t *testing.T) {
	live := context.Background()
	left, cancel := context.WithCancel(live)
	cancel()
	broke := status.Error(codes.Unavailable, "error reading from server: EOF")
	answered := metadata.Pairs(answeredBy, "n2")
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		stream    brokenStream
		ownerGone bool
	}{
		{"connection broke", live, brokenStream{err: broke}, true},
		{"the owner answered unavailable", live, brokenStream{err: status.Error(codes.Unavailable, "etcd: no leader"), trailer: answered}, false},
		{"the owner answered another code", live, brokenStream{err: status.Error(codes.FailedPrecondition, "paused"), trailer: answered}, false},
		{"the caller left", left, brokenStream{err: broke}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &ownerCall{node: "n2", ctx: tc.ctx}
			err := relay(o, "n1", "exec", forwarded[int](tc.stream), func(int) error { return nil })
			if !tc.ownerGone {
				if !errors.Is(err, tc.stream.err) {
					t.Fatalf("relay returned %v; want the owner's status %v as it came", err, tc.stream.err)
				}
				return
			}
			st := shoal.GRPCStatus(err)
			if status.Code(st) != codes.Unavailable || shoal.OwnerGone(st) != "n2" {
				t.Fatalf("relay returned %v (owner %q); want UNAVAILABLE naming owner n2", st, shoal.OwnerGone(st))
			}
			if want := "owner node n2 went away during the exec (served by node n1): error reading from server: EOF"; status.Convert(st).Message() != want {
				t.Fatalf("message %q; want %q", status.Convert(st).Message(), want)
			}
		})
	}
}
