package apiserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/metrics"
	"shoal/pki"
	"shoal/store"
)

// Runtime is what the API needs of the node's container runtime.
type Runtime interface {
	Exec(ctx context.Context, id string, spec shoal.ExecSpec, stdout, stderr io.Writer) (shoal.ExecResult, error)
	Logs(ctx context.Context, id string, follow bool, tail int, stdout, stderr io.Writer) error
	// StatPath reports what is at an absolute path of the container,
	// running or not; nothing there is shoal.NotFound.
	StatPath(ctx context.Context, id, path string) (shoal.PathStat, error)
	// CopyTo extracts a tar stream into dir, an existing directory of the
	// container, running or not.
	CopyTo(ctx context.Context, id, dir string, tar io.Reader) error
	// CopyFrom reads path as a tar stream whose top-level entry is the
	// stat's Name.
	CopyFrom(ctx context.Context, id, path string) (io.ReadCloser, shoal.PathStat, error)
}

// Engine is what CreateSandbox asks of the node's container engine before
// it stores anything: whether the image is there (nothing can be pulled).
type Engine interface {
	HasImage(ctx context.Context, ref string) (bool, error)
}

// Config of a Server.
type Config struct {
	Store *store.Store
	// Runtime may be nil: Exec, Logs and the copies then answer
	// UNAVAILABLE.
	Runtime Runtime
	// Engine may be nil: CreateSandbox then skips the image check (the
	// owning node's agent still reports a missing image as ERROR).
	Engine Engine
	// MaxWatches and MaxExecs cap the streams served at once: watches,
	// and container streams (exec, copies, logs --follow). 0 means the
	// defaults.
	MaxWatches, MaxExecs int
	// MaxStreamsPerClient caps the streams one client holds at once (0:
	// DefaultMaxStreamsPerClient; negative: no cap).
	MaxStreamsPerClient int
	// Node is assigned to the sandboxes this server creates.
	Node string
	// Liveness, if set, says whether the node holds its liveness lease.
	// While it does not (cut off from etcd, or just resumed from a stop),
	// shoal.v1.Shoal calls are refused at once with UNAVAILABLE marked
	// not-applied, so a client moves to another node instead of waiting
	// on this one's etcd.
	Liveness Liveness
	// DefaultImage for sandboxes that name none.
	DefaultImage string
	// Transport serves the API and dials other nodes (forwarding): mutual
	// TLS, or plaintext when nil.
	Transport *pki.Transport
	// Audit, if set, receives a record of every mutating call and exec.
	Audit Auditor
	// Metrics, if set, counts calls by method and code, with latencies.
	Metrics *metrics.Metrics
	// Events, if set, records the deletions asked for (events.go).
	Events Events
	Logger *slog.Logger
	Tracer trace.Tracer
	// TracerProvider, if set, traces forwarded calls (their trace context
	// goes to the owner node).
	TracerProvider trace.TracerProvider
	// Twins maps the full names of methods of other services served on
	// the same gRPC server (package openshellapi) to the shoal.v1 method
	// each one is: a twin's roles authorize it, its liveness rule and
	// whether it is audited apply (authz.go). A method in neither table is
	// admin only.
	Twins map[string]string
}

// Liveness is the node's hold on its liveness lease (registry.Registry).
type Liveness interface{ Held() bool }

// Server implements shoal.v1.Shoal.
type Server struct {
	shoalv1.UnimplementedShoalServer
	cfg    Config
	log    *slog.Logger
	tokens *tokenSigner
	peers  peers

	// life ends at Shutdown; streams and waits end with it.
	life      context.Context
	shutdown  context.CancelCauseFunc
	watches   *streamCap
	execs     *streamCap
	perClient *clientStreams
}

var _ shoalv1.ShoalServer = (*Server)(nil)

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Node == "" {
		return nil, errors.New("apiserver: store and node are required")
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = shoal.DefaultImage
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("shoal/apiserver")
	}
	if cfg.MaxWatches <= 0 {
		cfg.MaxWatches = DefaultMaxWatches
	}
	if cfg.MaxExecs <= 0 {
		cfg.MaxExecs = DefaultMaxExecs
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("subsystem", "api"), tokens: &tokenSigner{st: cfg.Store}, peers: peers{transport: cfg.Transport, tracing: cfg.TracerProvider},
		watches: newStreamCap(cfg.MaxWatches, "watch streams", "max-watches"),
		execs:   newStreamCap(cfg.MaxExecs, "exec, copy and log-follow streams", "max-execs")}
	if cfg.MaxStreamsPerClient == 0 {
		cfg.MaxStreamsPerClient = DefaultMaxStreamsPerClient
	}
	s.cfg.MaxStreamsPerClient = cfg.MaxStreamsPerClient
	s.perClient = &clientStreams{max: cfg.MaxStreamsPerClient, n: map[string]int{}}
	s.life, s.shutdown = context.WithCancelCause(context.Background())
	return s, nil
}

// ServerOptions are the grpc.Server options the service expects: the
// request size limit and the interceptors that map errors, recover panics,
// trace and log (method, code and duration only: never a request body).
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(s.cfg.Transport.ServerCreds()),
		grpc.MaxRecvMsgSize(shoal.MaxRequestBytes),
		grpc.MaxSendMsgSize(shoal.MaxResponseBytes),
		grpc.ForceServerCodecV2(newRelayCodec()),
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	}
}

// live refuses a shoal.v1.Shoal call while the node does not hold its
// liveness lease. The Cluster service still answers: cluster status is
// most wanted when things are wrong.
func (s *Server) live(method string) error {
	if s.cfg.Liveness == nil || !strings.HasPrefix(method, "/shoal.v1.Shoal/") || s.cfg.Liveness.Held() {
		return nil
	}
	return shoal.NotApplied(shoal.Unavailable("node %s cannot reach etcd (it has not renewed its liveness lease within its TTL); nothing was done: ask another node", s.cfg.Node))
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	ctx, span := s.cfg.Tracer.Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
	reqID := ""
	if audited(s.twin(info.FullMethod)) {
		reqID = requestID(ctx, req)
		_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDHeader, reqID))
		ctx = withRequestID(ctx, reqID)
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			err = shoal.GRPCStatus(errors.New("internal error"))
		}
		s.finish(span, info.FullMethod, start, err)
		s.audit(ctx, info.FullMethod, req, reqID, start, err)
	}()
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, shoal.GRPCStatus(err)
	}
	if err := s.live(s.twin(info.FullMethod)); err != nil {
		return nil, shoal.GRPCStatus(err)
	}
	resp, err = h(ctx, req)
	return resp, shoal.GRPCStatus(err)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	start := time.Now()
	// The handler's context carries the span: what it does (an exec
	// forwarded to the owner, the store reads) are children of the call.
	sctx, span := s.cfg.Tracer.Start(ss.Context(), info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
	// Every stream's context also ends at Shutdown, so that no handler
	// holds GracefulStop: a watch or a follow would run until its client
	// left, and an exec until its command ended.
	ctx, cancel := s.bindShutdown(sctx)
	// Whatever status this stream ends with, it is this node's answer: a
	// node relaying it can tell it from a connection that broke (relay).
	ss.SetTrailer(metadata.Pairs(answeredBy, s.cfg.Node))
	first := &firstMessage{ServerStream: ss}
	reqID := ""
	if audited(s.twin(info.FullMethod)) {
		reqID = requestID(ss.Context(), nil)
		_ = ss.SetHeader(metadata.Pairs(RequestIDHeader, reqID))
	}
	defer func() {
		cancel()
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			err = shoal.GRPCStatus(errors.New("internal error"))
		}
		s.finish(span, info.FullMethod, start, err)
		s.audit(ss.Context(), info.FullMethod, first.first, reqID, start, err)
	}()
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return shoal.GRPCStatus(err)
	}
	if err := s.live(s.twin(info.FullMethod)); err != nil {
		return shoal.GRPCStatus(err)
	}
	release, err := s.perClient.acquire(ss.Context(), s.cfg.Transport.Secure())
	if err != nil {
		return shoal.GRPCStatus(err)
	}
	defer release()
	err = h(srv, &boundStream{ServerStream: first, ctx: withRequestID(ctx, reqID)})
	if ss.Context().Err() == nil && errors.Is(context.Cause(ctx), errShuttingDown) {
		// The client is still there: tell it why its stream ended.
		err = errShuttingDown
	}
	return shoal.GRPCStatus(err)
}

func (s *Server) finish(span trace.Span, method string, start time.Time, err error) {
	st, _ := status.FromError(err)
	span.SetAttributes(attribute.String("rpc.grpc.status_code", st.Code().String()))
	if err != nil {
		span.SetStatus(codes.Error, st.Code().String())
	}
	span.End()
	s.cfg.Metrics.APIRequest(method, st.Code().String(), time.Since(start))
	s.log.Debug("rpc", "method", method, "code", st.Code().String(), "duration", time.Since(start))
}

func ws(w string) string {
	if w == "" {
		return store.DefaultWorkspace
	}
	return w
}

// MaxListPageBytes ends a list page early: with objects of at most
// store.MaxStoredBytes, a page stays far below shoal.MaxResponseBytes.
const MaxListPageBytes = 2 << 20

func listOptions(n int32) store.ListOptions {
	return store.ListOptions{Limit: pageLimit(n), MaxBytes: MaxListPageBytes}
}

func pageLimit(n int32) int64 {
	if n == 0 {
		return 500
	}
	return int64(n)
}

// redact replaces every credential value; keys stay visible.
func redact(p *shoalv1.Provider) *shoalv1.Provider {
	if p == nil {
		return nil
	}
	out := &shoalv1.Provider{Meta: p.Meta, Type: p.Type, Config: p.Config, TypeName: p.TypeName}
	if len(p.Credentials) > 0 {
		out.Credentials = make(map[string]string, len(p.Credentials))
		for k := range p.Credentials {
			out.Credentials[k] = Redacted
		}
	}
	return out
}

// Redacted stands in for every credential value in responses.
const Redacted = "<redacted>"

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}
