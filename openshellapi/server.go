package openshellapi

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"shoal"
	openshellv1 "shoal/api/openshell/v1"
	"shoal/apiserver"
	"shoal/store"
)

// Config of a Server.
type Config struct {
	// API is the node's shoal.v1 server: every method maps onto it.
	API *apiserver.Server
	// Store is the node's store, for what the shoal.v1 methods do not
	// answer (looking a sandbox up by its uid in the watch cache).
	Store *store.Store
	// Version is the shoal binary's, reported by Health and GetGatewayInfo.
	Version string
	// Driver names the node's container runtime ("docker", "hollow") in
	// GetGatewayInfo.
	Driver string
	// Liveness, if set, says whether the node holds its liveness lease:
	// Health answers UNHEALTHY while it does not.
	Liveness interface{ Held() bool }
	Logger   *slog.Logger
}

// Server implements openshell.v1.OpenShell. Methods it does not implement
// answer UNIMPLEMENTED: the served ones not yet written through the
// embedded Unimplemented server, the ones shoal does not serve through
// Register's handlers (unserved.go).
type Server struct {
	openshellv1.UnimplementedOpenShellServer
	cfg Config
	api *apiserver.Server
	log *slog.Logger
}

var _ openshellv1.OpenShellServer = (*Server)(nil)

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.API == nil || cfg.Store == nil {
		return nil, errors.New("openshellapi: the API server and the store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Driver == "" {
		cfg.Driver = "docker"
	}
	return &Server{cfg: cfg, api: cfg.API, log: cfg.Logger.With("subsystem", "openshellapi")}, nil
}

// ServiceName is the full name of the service served.
const ServiceName = "openshell.v1.OpenShell"

// Register serves s on gs: the declared methods, the one whose messages
// are not declared (undeclared: UpdateConfig), and every other method of
// OpenShell's service (unserved) answering UNIMPLEMENTED with a message
// that says so. Each handler first refuses a call that carries a bearer
// token (refuseBearer); it runs inside gs's interceptors, after the call
// was authorized as its twin (Twins).
func Register(gs *grpc.Server, s *Server) {
	sd := openshellv1.OpenShell_ServiceDesc
	sd.Methods = append([]grpc.MethodDesc(nil), sd.Methods...)
	sd.Streams = append([]grpc.StreamDesc(nil), sd.Streams...)
	for i, m := range sd.Methods {
		sd.Methods[i].Handler = unaryGate(m.Handler)
	}
	for i, st := range sd.Streams {
		sd.Streams[i].Handler = streamGate(st.Handler)
	}
	for _, m := range undeclared {
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: m.MethodName, Handler: unaryGate(m.Handler)})
	}
	for _, name := range unserved {
		// A stream handler answers unary calls as well: it reads nothing.
		sd.Streams = append(sd.Streams, grpc.StreamDesc{StreamName: name, ServerStreams: true, ClientStreams: true,
			Handler: streamGate(notServed(name))})
	}
	gs.RegisterService(&sd, s)
}

// Twins maps each method of the service to the shoal.v1 method it is
// authorized, audited and liveness-checked as (apiserver.Config.Twins).
// The ones shoal does not serve follow Cluster/Status (every role may
// call it), so that every caller learns they are not served.
func Twins() map[string]string {
	const shoalSvc, cluster = "/shoal.v1.Shoal/", "/shoal.v1.Cluster/Status"
	t := map[string]string{
		"Health":                 cluster,
		"GetCurrentUser":         cluster,
		"GetGatewayInfo":         cluster,
		"CreateSandbox":          shoalSvc + "CreateSandbox",
		"GetSandbox":             shoalSvc + "GetSandbox",
		"ListSandboxes":          shoalSvc + "ListSandboxes",
		"ListSandboxProviders":   shoalSvc + "GetSandbox",
		"AttachSandboxProvider":  shoalSvc + "AttachProvider",
		"DetachSandboxProvider":  shoalSvc + "DetachProvider",
		"DeleteSandbox":          shoalSvc + "DeleteSandbox",
		"StopSandbox":            shoalSvc + "StopSandbox",
		"StartSandbox":           shoalSvc + "StartSandbox",
		"ExecSandbox":            shoalSvc + "Exec",
		"ExecSandboxInteractive": shoalSvc + "ExecInteractive",
		"GetSandboxLogs":         shoalSvc + "Logs",
		"WatchSandbox":           shoalSvc + "WatchSandboxes",
		"CreateProvider":         shoalSvc + "CreateProvider",
		"GetProvider":            shoalSvc + "GetProvider",
		"ListProviders":          shoalSvc + "ListProviders",
		"UpdateProvider":         shoalSvc + "UpdateProvider",
		"DeleteProvider":         shoalSvc + "DeleteProvider",
		"UpdateConfig":           shoalSvc + "UpdateSandbox",
	}
	for _, name := range unserved {
		t[name] = cluster
	}
	out := make(map[string]string, len(t))
	for m, twin := range t {
		out["/"+ServiceName+"/"+m] = twin
	}
	return out
}

func unaryGate(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		gated := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			inner := func(ctx context.Context, req any) (any, error) {
				if err := refuseBearer(ctx); err != nil {
					return nil, err
				}
				return next(ctx, req)
			}
			if icpt == nil {
				return inner(ctx, req)
			}
			return icpt(ctx, req, info, inner)
		}
		return h(srv, ctx, dec, gated)
	}
}

func streamGate(h grpc.StreamHandler) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		if err := refuseBearer(ss.Context()); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// refuseBearer refuses a call that carries a bearer token: shoal
// authenticates callers by their client certificate, and a token it would
// ignore must not look accepted.
func refuseBearer(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("authorization")) == 0 {
		return nil
	}
	return status.Error(codes.Unauthenticated, "shoal does not accept bearer tokens (authorization metadata): it authenticates callers by their TLS client certificate (mutual TLS, certificates from `shoal certs`), or serves plaintext on loopback only; connect without a token")
}

func notServed(name string) grpc.StreamHandler {
	return func(any, grpc.ServerStream) error {
		return status.Errorf(codes.Unimplemented, "shoal does not serve %s/%s; it serves the sandbox, provider and gateway methods listed in docs/openshell.md", ServiceName, name)
	}
}

// ws is a request's workspace: "default" when empty.
func ws(w string) string {
	if w == "" {
		return store.DefaultWorkspace
	}
	return w
}

// generatedName is a name for an object created without one: prefix, '-'
// and 8 random lower-case letters and digits (a DNS-1123 label).
func generatedName(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + "-" + string(b)
}

// The one place this package turns errors into gRPC statuses. OpenShell's
// codes are shoal's (shoal.GRPCStatus) but for one: a caller's own stale
// resource_version precondition is ABORTED, with the current version in
// the message, where shoal.v1 says FAILED_PRECONDITION. rename puts
// OpenShell's field names in place of shoal's in an invalid-argument
// error: pairs of shoal prefix, OpenShell prefix, longest first.
func grpcError(err error, precondition bool, rename ...string) error {
	if err == nil {
		return nil
	}
	var e *shoal.Error
	if !errors.As(err, &e) {
		return shoal.GRPCStatus(err)
	}
	if precondition && e.Kind == shoal.KindConflict {
		return status.Error(codes.Aborted, e.Error())
	}
	if e.Field != "" {
		for i := 0; i+1 < len(rename); i += 2 {
			if f, ok := strings.CutPrefix(e.Field, rename[i]); ok && (f == "" || f[0] == '.' || f[0] == '[') {
				c := *e
				c.Field = rename[i+1] + f
				return shoal.GRPCStatus(&c)
			}
		}
	}
	return shoal.GRPCStatus(err)
}

// invalid is INVALID_ARGUMENT naming an OpenShell request field.
func invalid(field, format string, a ...any) error {
	return shoal.GRPCStatus(shoal.Invalid(field, format, a...))
}

func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

func failedPrecondition(format string, a ...any) error {
	return shoal.GRPCStatus(shoal.FailedPrecondition(format, a...))
}
