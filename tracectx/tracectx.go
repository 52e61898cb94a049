package tracectx

import (
	"context"
	"crypto/rand"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace context, the one shoal's processes speak.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Start begins a new sampled trace for a client command: ctx carries it
// (as a remote parent, so a client without an exporter makes no spans of
// its own) and every call made with otelgrpc's client handler sends it on.
// It returns the trace id to look for.
func Start(ctx context.Context) (context.Context, string, error) {
	var tid trace.TraceID
	var sid trace.SpanID
	if _, err := rand.Read(tid[:]); err != nil {
		return ctx, "", err
	}
	if _, err := rand.Read(sid[:]); err != nil {
		return ctx, "", err
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc), tid.String(), nil
}
