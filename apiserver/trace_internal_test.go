package apiserver

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"shoal/store"
)

// testStream is the least of a server stream the interceptor touches.
type testStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s testStream) Context() context.Context    { return s.ctx }
func (s testStream) SetHeader(metadata.MD) error { return nil }
func (s testStream) SetTrailer(metadata.MD)      {}

// A stream handler runs under the call's span: what it starts (a
// forwarded exec's client span, a store update) is a child of the call,
// as a unary handler's is.
func TestStreamHandlerRunsUnderTheCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s, err := New(Config{Store: store.New(nil, store.Options{}), Node: "n1", Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	const method = "/shoal.v1.Shoal/WatchSandboxes"
	var inHandler trace.SpanContext
	err = s.stream(nil, testStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true},
		func(_ any, ss grpc.ServerStream) error {
			inHandler = trace.SpanFromContext(ss.Context()).SpanContext()
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != method {
		t.Fatalf("spans ended: %d, want the call's", len(ended))
	}
	if !inHandler.IsValid() || inHandler.SpanID() != ended[0].SpanContext().SpanID() {
		t.Fatalf("the handler's context carries span %v, want the call's %v", inHandler.SpanID(), ended[0].SpanContext().SpanID())
	}
}
