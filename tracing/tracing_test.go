package tracing_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"shoal/tracing"
)

// received collects what a collector was sent: span names by the
// service.instance.id of their resource.
type received struct {
	mu    sync.Mutex
	spans map[string][]string
	got   chan struct{}
}

func newReceived() *received {
	return &received{spans: map[string][]string{}, got: make(chan struct{}, 16)}
}

func (r *received) add(req *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		inst := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.instance.id" {
				inst = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans[inst] = append(r.spans[inst], sp.GetName())
			}
		}
	}
	r.got <- struct{}{}
}

// grpcCollector is an OTLP/gRPC trace receiver on loopback.
type grpcCollector struct {
	coltrace.UnimplementedTraceServiceServer
	r *received
}

func (g *grpcCollector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.r.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// export makes a provider for o, ends one span and flushes it.
func export(t *testing.T, o tracing.Options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp, shutdown, err := tracing.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "probe-"+o.OTLPProtocol)
	span.End()
	if err := shutdown(ctx); err != nil { // flushes the batch
		t.Fatalf("shutdown (flush) to %s over %q: %v", o.OTLPEndpoint, o.OTLPProtocol, err)
	}
}

func check(t *testing.T, r *received, node, span string) {
	t.Helper()
	select {
	case <-r.got:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector received nothing")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := strings.Join(r.spans[node], ","); got != span {
		t.Fatalf("collector got spans %q for instance %q (all: %v), want %q", got, node, r.spans, span)
	}
}

// Spans reach an OTLP collector over gRPC (the default) and over HTTP
// with protobuf bodies, carrying the node as service.instance.id.
func TestOTLPProtocols(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		r := newReceived()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		coltrace.RegisterTraceServiceServer(gs, &grpcCollector{r: r})
		done := make(chan struct{})
		go func() { defer close(done); _ = gs.Serve(lis) }()
		t.Cleanup(func() { gs.Stop(); <-done })
		export(t, tracing.Options{OTLPEndpoint: lis.Addr().String(), OTLPInsecure: true, Node: "n-grpc"})
		check(t, r, "n-grpc", "probe-")
	})
	t.Run("http/protobuf", func(t *testing.T) {
		r := newReceived()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
				http.Error(w, "not an OTLP/HTTP trace export", http.StatusBadRequest)
				return
			}
			body, err := io.ReadAll(req.Body)
			var msg coltrace.ExportTraceServiceRequest
			if err == nil {
				err = proto.Unmarshal(body, &msg)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.add(&msg)
			w.Header().Set("Content-Type", "application/x-protobuf")
			out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
			_, _ = w.Write(out)
		}))
		t.Cleanup(srv.Close)
		export(t, tracing.Options{OTLPEndpoint: strings.TrimPrefix(srv.URL, "http://"), OTLPInsecure: true, OTLPProtocol: tracing.ProtocolHTTP, Node: "n-http"})
		check(t, r, "n-http", "probe-http/protobuf")
	})
}

// A protocol that is neither is refused naming the flag.
func TestOTLPProtocolRefused(t *testing.T) {
	_, _, err := tracing.New(context.Background(), tracing.Options{OTLPEndpoint: "127.0.0.1:4317", OTLPProtocol: "thrift"})
	if err == nil || !strings.Contains(err.Error(), "--otlp-protocol") {
		t.Fatalf("protocol thrift: %v, want an error naming --otlp-protocol", err)
	}
}
