// Package tracing makes a node's OpenTelemetry tracer provider from its
// flags: spans exported over OTLP (--otlp-endpoint; gRPC, or HTTP with
// protobuf bodies by --otlp-protocol http/protobuf), written as JSON
// lines to a file (--trace-file, the SDK's stdout exporter), or not made at
// all (the default: a no-op provider). Trace context travels between
// processes as W3C traceparent (package tracectx), through otelgrpc's
// handlers on the API server, on node-to-node forwarding and in the CLI
// (--trace).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"shoal/tracectx"
)

// Options say where spans go.
type Options struct {
	// OTLPEndpoint is host:port of an OTLP collector; OTLPInsecure sends
	// to it without TLS (a collector on loopback). OTLPProtocol is how:
	// ProtocolGRPC (the default) or ProtocolHTTP (POST /v1/traces).
	OTLPEndpoint string
	OTLPInsecure bool
	OTLPProtocol string
	// File receives spans as JSON lines (mode 0600, appended).
	File string
	// Node names the service instance on every span.
	Node string
}

// The OTLP protocols, named as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// New returns the tracer provider and its shutdown (which flushes). With
// neither an endpoint nor a file it is a no-op provider.
func New(ctx context.Context, o Options) (trace.TracerProvider, func(context.Context) error, error) {
	otel.SetTextMapPropagator(tracectx.Propagator)
	if o.OTLPEndpoint == "" && o.File == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	if o.OTLPEndpoint != "" && o.File != "" {
		return nil, nil, errors.New("--otlp-endpoint, --trace-file: give one of the two")
	}
	switch o.OTLPProtocol {
	case "", ProtocolGRPC, ProtocolHTTP:
	default:
		return nil, nil, fmt.Errorf("--otlp-protocol: %q is not one of %s, %s", o.OTLPProtocol, ProtocolGRPC, ProtocolHTTP)
	}
	var exp sdktrace.SpanExporter
	var closeFile func() error
	if o.File != "" {
		f, err := os.OpenFile(o.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--trace-file: %w", err)
		}
		closeFile = f.Close
		if exp, err = stdouttrace.New(stdouttrace.WithWriter(f)); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("--trace-file: %w", err)
		}
	} else {
		var err error
		if exp, err = otlpExporter(ctx, o); err != nil {
			return nil, nil, fmt.Errorf("--otlp-endpoint %s: %w", o.OTLPEndpoint, err)
		}
	}
	res := resource.NewSchemaless(semconv.ServiceName("shoal"), semconv.ServiceInstanceID(o.Node))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	shutdown := func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if closeFile != nil {
			err = errors.Join(err, closeFile())
		}
		return err
	}
	return tp, shutdown, nil
}

func otlpExporter(ctx context.Context, o Options) (sdktrace.SpanExporter, error) {
	if o.OTLPProtocol == ProtocolHTTP {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(o.OTLPEndpoint)}
		if o.OTLPInsecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(o.OTLPEndpoint)}
	if o.OTLPInsecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}
