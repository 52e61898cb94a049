package cli

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"shoal/apiclient"
)

// A list printed as -o json|yaml is received with its items still
// encoded: the fetch of the pages decodes only what it needs (the next
// page's token, the warnings), and each item is decoded where it is
// printed, on the render workers (pageRenderer), while the next page is
// on its way. Decoded on the fetch, a page of a thousand items would hold
// the next page's request back for as long as it takes one core to
// decode them.

// invokeEncoded makes the unary call method with req and decodes the
// reply into resp, but for resp's items field: its items are returned as
// they are encoded, each to be decoded into an item of that field.
func invokeEncoded(ctx context.Context, conn *apiclient.Conn, method string, req, resp proto.Message) ([][]byte, error) {
	r := &encodedReply{resp: resp}
	err := conn.Invoke(ctx, method, req, r, grpc.ForceCodecV2(itemsCodec{encoding.GetCodecV2("proto")}))
	return r.items, err
}

// encodedReply is a reply whose items stay encoded (itemsCodec).
type encodedReply struct {
	resp  proto.Message
	items [][]byte
}

// itemsCodec is gRPC's protobuf codec (of the same name, so that the
// server sees the usual content type), except for an *encodedReply.
type itemsCodec struct{ encoding.CodecV2 }

func (c itemsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*encodedReply)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// A copy: gRPC reuses data's buffers once Unmarshal returns, and the
	// items are slices of it.
	b := data.Materialize()
	// A retried call (apiclient retries lists) decodes into the same
	// reply: only this answer's items count.
	r.items = r.items[:0]
	items := r.resp.ProtoReflect().Descriptor().Fields().ByName("items").Number()
	var rest []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if num == items && typ == protowire.BytesType {
			item, _ := protowire.ConsumeBytes(b[n : n+m])
			r.items = append(r.items, item)
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return proto.Unmarshal(rest, r.resp)
}
