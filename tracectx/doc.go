// Package tracectx is the trace context shoal's processes pass to each
// other (W3C traceparent) and the way a client command begins a trace of
// its own (`shoal --trace`). It is apart from package tracing, which makes
// a node's tracer provider and its exporters, so that the CLI, which
// exports nothing, links none of them (OTLP over gRPC and HTTP, the SDK).
package tracectx
