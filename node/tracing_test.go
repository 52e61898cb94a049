package node_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/tracectx"
)

// A delete under concurrent label writers, sent with a trace context (as
// `shoal --trace` sends it): the node continues that trace, and among its
// spans are the store's updates, one of them showing the conflicts the
// update loop absorbed. (Hollow runtime.)
func TestDeleteTraceShowsConflicts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	cfg.Tracer = tp
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(tracectx.Propagator))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := shoalv1.NewShoalClient(conn)

	for round := 0; ; round++ {
		if round == 60 {
			t.Fatal("60 deletes under writers: no traced update showed a conflict")
		}
		name := fmt.Sprintf("t%d", round)
		if _, err := api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}}); err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		var done atomic.Int64
		for w := range 8 {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					if _, err := api.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: name, SetLabels: map[string]string{"w": fmt.Sprintf("%d-%d", w, i)}}); err == nil {
						done.Add(1)
					}
				}
			})
		}
		// The writers are all at it before the delete goes.
		testenv.Eventually(t, 30*time.Second, "the writers are writing", func() (bool, error) { return done.Load() >= 16, nil })
		tctx, traceID, err := tracectx.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, derr := api.DeleteSandbox(tctx, &shoalv1.DeleteSandboxRequest{Name: name, Wait: true})
		stop.Store(true)
		wg.Wait()
		if derr != nil {
			t.Fatalf("delete under writers: %v", derr)
		}
		var server, updates, conflicted int
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch s.Name() {
			case "shoal.v1.Shoal/DeleteSandbox":
				server++
			case "store.update":
				updates++
				for _, a := range s.Attributes() {
					if a.Key == "shoal.update.conflicts" && a.Value.AsInt64() > 0 {
						conflicted++
					}
				}
			}
		}
		if server == 0 || updates == 0 {
			t.Fatalf("trace %s: %d server spans, %d store updates: the node did not continue the caller's trace", traceID, server, updates)
		}
		if conflicted > 0 {
			t.Logf("round %d: trace %s has %d store updates, %d with conflicts", round, traceID, updates, conflicted)
			return
		}
	}
}
