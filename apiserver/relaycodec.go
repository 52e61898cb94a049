package apiserver

import (
	"errors"
	"io"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec relayCodec wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

// relayCodec is gRPC's protobuf codec, except for a rawFrame: that is a
// message relayed as it came, its encoding kept and sent on, never
// decoded or encoded again. A node that forwards a copy's data to the
// owner (or the owner's back to its client) then costs no copy of its
// own per byte: the copy's stream passes through in the buffers it
// arrived in. The server forces it on every call and the peers'
// connections on every forwarded one; for every other message it is the
// protobuf codec itself.
type relayCodec struct{ encoding.CodecV2 }

func newRelayCodec() relayCodec { return relayCodec{encoding.GetCodecV2("proto")} }

// rawFrame is one message of a stream, as its encoding.
type rawFrame struct{ data mem.BufferSlice }

func (c relayCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*rawFrame); ok {
		// gRPC frees what Marshal returns once it is written: the
		// frame's reference goes with it.
		d := f.data
		f.data = nil
		return d, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c relayCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*rawFrame); ok {
		// gRPC frees data when Unmarshal returns: the frame keeps a
		// reference of its own.
		data.Ref()
		f.data = data
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// free releases a frame that will not be sent.
func (f *rawFrame) free() {
	if f.data != nil {
		f.data.Free()
		f.data = nil
	}
}

// rawStream is a stream relayRaw reads: a forwarded call.
type rawStream interface {
	RecvMsg(any) error
	Trailer() metadata.MD
}

// relayRaw is relay for messages passed on as they came (rawFrames): a
// copy's data.
func relayRaw(o *ownerCall, self, what string, recv rawStream, send func(any) error) error {
	for {
		var f rawFrame
		err := recv.RecvMsg(&f)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return o.failed(self, what, err, recv.Trailer())
		}
		if err := send(&f); err != nil {
			f.free() // unless gRPC took it
			return err
		}
	}
}
