package cli

import (
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
)

// itemsCodec returns a list reply's items as they were encoded, wherever
// they are in the reply, and decodes the rest; other replies as gRPC's
// codec does.
func TestItemsCodec(t *testing.T) {
	items := []*shoalv1.Sandbox{
		{Meta: &shoalv1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}}},
		{},
		{Meta: &shoalv1.ObjectMeta{Name: "c"}, Status: &shoalv1.SandboxStatus{Message: "ünïcødé"}},
	}
	var wire []byte
	var want [][]byte
	for i, sb := range items {
		b, err := proto.Marshal(sb)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
		wire = protowire.AppendBytes(protowire.AppendTag(wire, 1, protowire.BytesType), b)
		if i == 0 { // the other fields between items
			rest, err := proto.Marshal(&shoalv1.ListSandboxesResponse{NextPageToken: "tok", ResourceVersion: 42, Warnings: []string{"w"}})
			if err != nil {
				t.Fatal(err)
			}
			wire = append(wire, rest...)
		}
	}
	c := itemsCodec{encoding.GetCodecV2("proto")}
	r := &encodedReply{resp: &shoalv1.ListSandboxesResponse{}}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, r); err != nil {
		t.Fatal(err)
	}
	resp := r.resp.(*shoalv1.ListSandboxesResponse)
	if resp.NextPageToken != "tok" || resp.ResourceVersion != 42 || len(resp.Warnings) != 1 || len(resp.Items) != 0 {
		t.Errorf("decoded reply %v", resp)
	}
	if len(r.items) != len(want) {
		t.Fatalf("%d items, want %d", len(r.items), len(want))
	}
	for i := range want {
		if string(r.items[i]) != string(want[i]) {
			t.Errorf("item %d: %x, want %x", i, r.items[i], want[i])
		}
	}
	// Any other reply: decoded whole.
	plain := &shoalv1.ListSandboxesResponse{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, plain); err != nil || len(plain.Items) != 3 || plain.NextPageToken != "tok" {
		t.Errorf("plain reply: %v %v", plain, err)
	}
	// A reply cut short is an error.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:len(wire)-3])}, &encodedReply{resp: &shoalv1.ListSandboxesResponse{}}); err == nil {
		t.Error("a truncated reply decoded")
	}
}
