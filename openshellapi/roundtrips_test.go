package openshellapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal"
	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/internal/testenv"
	"shoal/openshellapi"
	"shoal/store"
)

// The compat layer adds no etcd round trip to a call (issue 24, section
// 4): each served unary OpenShell method, called in process on a node's
// stack (store with its watch cache, apiserver, openshellapi), makes as
// many etcd requests as its shoal.v1 twin does for the same work.
//
// Two calls do more than their twin alone, and exactly the shoal.v1 calls
// that give the same answer (the pairs below say why): DetachSandboxProvider
// of a provider not attached reads the provider, and ListSandboxProviders
// of a sandbox with providers lists them. Both are reads, on paths that
// write nothing.
//
// The requests are counted by a unary interceptor on the store's etcd
// client, only for calls whose context carries the counter: the cache's
// watches, progress requests and the registry's renewals run on contexts
// of their own and are not counted.

type counterKey struct{}

// etcdCounter counts the unary etcd requests made on a context it tagged.
type etcdCounter struct {
	mu      sync.Mutex
	methods []string
}

func (c *etcdCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if ctx.Value(counterKey{}) == c {
		c.mu.Lock()
		c.methods = append(c.methods, method[strings.LastIndex(method, "/")+1:])
		c.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// count runs f on a tagged context and returns the etcd requests it made.
func (c *etcdCounter) count(ctx context.Context, f func(context.Context) error) ([]string, error) {
	c.mu.Lock()
	c.methods = nil
	c.mu.Unlock()
	err := f(context.WithValue(ctx, counterKey{}, c))
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.methods, err
}

type rtRig struct {
	st  *store.Store
	api *apiserver.Server
	osh *openshellapi.Server
	n   *etcdCounter
}

// rtNode is a node's API stack in process over a fresh etcd, as node.Run
// builds it (a cached store, the API server, the OpenShell server), with
// no runtime: the sandbox and provider calls are etcd's.
func rtNode(t *testing.T) *rtRig {
	t.Helper()
	_, srv := testenv.Etcd(t)
	n := &etcdCounter{}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + srv.Endpoint()}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(n.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st := store.New(c, store.Options{})
	cache := st.UseCache(store.CacheOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-cache.Ready():
	case <-time.After(time.Minute):
		t.Fatal("the watch cache did not list within a minute")
	}
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterNode(ctx, store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "127.0.0.1:1"}, Instance: "i1"}, lease.ID); err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	osh, err := openshellapi.New(openshellapi.Config{API: api, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return &rtRig{st: st, api: api, osh: osh, n: n}
}

// fresh brings the cache up to etcd's revision (an uncounted consistent
// read of each kind), so that neither side of a pair pays for the other's
// writes still in flight to the cache.
func (r *rtRig) fresh(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := r.st.ListSandboxes(ctx, "", store.ListOptions{Limit: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.ListProviders(ctx, "", store.ListOptions{Limit: 1}, nil); err != nil {
		t.Fatal(err)
	}
}

// calls counts f's etcd requests, the cache brought up to date first;
// want is the code f must end with.
func (r *rtRig) calls(t *testing.T, ctx context.Context, what string, want codes.Code, f func(context.Context) error) []string {
	t.Helper()
	r.fresh(t, ctx)
	m, err := r.n.count(ctx, f)
	// In process, shoal.v1 answers shoal's errors: its gRPC server maps
	// them to codes.
	if status.Code(shoal.GRPCStatus(err)) != want {
		t.Fatalf("%s: %v, want %s", what, err, want)
	}
	return m
}

func TestNoAddedEtcdRoundTrips(t *testing.T) {
	t.Parallel()
	r := rtNode(t)
	ctx := ctxT(t, 2*time.Minute)
	sb := func(name string) {
		t.Helper()
		if _, err := r.api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}}}); err != nil {
			t.Fatal(err)
		}
	}
	provider := func(name string) {
		t.Helper()
		if _, err := r.api.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name},
			Type: shoalv1.ProviderType_GENERIC, TypeName: "generic", Credentials: map[string]string{"TOKEN": "secret"}}}); err != nil {
			t.Fatal(err)
		}
	}
	attach := func(sandbox, p string) {
		t.Helper()
		if _, err := r.api.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: sandbox, Provider: p}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"os-get", "os-del", "os-stop", "os-start", "os-att", "os-det", "os-noop",
		"sh-del", "sh-stop", "sh-start", "sh-att", "sh-det", "sh-noop", "listed-a", "listed-b", "os-pol", "sh-pol"} {
		sb(name)
	}
	for _, name := range []string{"p", "os-upd", "sh-upd", "os-del", "sh-del"} {
		provider(name)
	}
	attach("os-det", "p")
	attach("sh-det", "p")
	attach("os-get", "p")
	for _, name := range []string{"os-start", "sh-start"} {
		if _, err := r.api.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	osh, api := r.osh, r.api
	OK, NotFound, Precondition := codes.OK, codes.NotFound, codes.FailedPrecondition
	type side struct {
		code codes.Code
		call func(context.Context) error
	}
	pairs := []struct {
		name   string
		compat side
		twin   []side // the shoal.v1 calls that do the same work
	}{
		{name: "Health", compat: side{OK, func(ctx context.Context) error { _, err := osh.Health(ctx, &openshellv1.HealthRequest{}); return err }}},
		{name: "GetGatewayInfo", compat: side{OK, func(ctx context.Context) error {
			_, err := osh.GetGatewayInfo(ctx, &openshellv1.GetGatewayInfoRequest{})
			return err
		}}},
		{name: "GetCurrentUser", compat: side{OK, func(ctx context.Context) error {
			_, err := osh.GetCurrentUser(ctx, &openshellv1.GetCurrentUserRequest{})
			return err
		}}},
		{name: "CreateSandbox",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "os-new", Spec: &openshellv1.SandboxSpec{}})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "sh-new"}}})
				return err
			}}}},
		{name: "GetSandbox",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "os-get"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "os-get"})
				return err
			}}}},
		{name: "GetSandbox missing",
			compat: side{NotFound, func(ctx context.Context) error {
				_, err := osh.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "nobody"})
				return err
			}},
			twin: []side{{NotFound, func(ctx context.Context) error {
				_, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "nobody"})
				return err
			}}}},
		{name: "ListSandboxes",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 1000})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 1000})
				return err
			}}}},
		{name: "ListSandboxes selector",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{LabelSelector: "team=ml"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{LabelSelector: "team=ml"})
				return err
			}}}},
		{name: "ListSandboxes all workspaces",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
				return err
			}}}},
		{name: "StopSandbox",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: "os-stop"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "sh-stop"})
				return err
			}}}},
		{name: "StartSandbox",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: "os-start"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "sh-start"})
				return err
			}}}},
		{name: "AttachSandboxProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "os-att", ProviderName: "p"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "sh-att", Provider: "p"})
				return err
			}}}},
		{name: "AttachSandboxProvider missing provider",
			compat: side{Precondition, func(ctx context.Context) error {
				_, err := osh.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "os-att", ProviderName: "nope"})
				return err
			}},
			twin: []side{{Precondition, func(ctx context.Context) error {
				_, err := api.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "sh-att", Provider: "nope"})
				return err
			}}}},
		{name: "DetachSandboxProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "os-det", ProviderName: "p"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.DetachProvider(ctx, &shoalv1.DetachProviderRequest{Name: "sh-det", Provider: "p"})
				return err
			}}}},
		// Known exception: OpenShell answers a provider that is not
		// attached with detached=false, OK, and a missing one with
		// FAILED_PRECONDITION; shoal.v1's DetachProvider answers both
		// FAILED_PRECONDITION without telling them apart. Telling them
		// apart is a GetProvider, only on this path, which writes
		// nothing: the work of the twin and a GetProvider.
		{name: "DetachSandboxProvider not attached",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "os-noop", ProviderName: "p"})
				return err
			}},
			twin: []side{{Precondition, func(ctx context.Context) error {
				_, err := api.DetachProvider(ctx, &shoalv1.DetachProviderRequest{Name: "sh-noop", Provider: "p"})
				return err
			}}, {OK, func(ctx context.Context) error {
				_, err := api.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"})
				return err
			}}}},
		{name: "ListSandboxProviders none attached",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.ListSandboxProviders(ctx, &openshellv1.ListSandboxProvidersRequest{SandboxName: "os-noop"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "os-noop"})
				return err
			}}}},
		// Known exception: the providers attached, whole, are what a
		// shoal.v1 client reads with GetSandbox (the twin, which names
		// them) and ListProviders: with providers attached, the call is
		// those two reads (one without any).
		{name: "ListSandboxProviders",
			compat: side{OK, func(ctx context.Context) error {
				r, err := osh.ListSandboxProviders(ctx, &openshellv1.ListSandboxProvidersRequest{SandboxName: "os-get"})
				if err == nil && len(r.Providers) != 1 {
					err = fmt.Errorf("%d providers attached, want 1", len(r.Providers))
				}
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "os-get"})
				return err
			}}, {OK, func(ctx context.Context) error {
				_, err := api.ListProviders(ctx, &shoalv1.ListProvidersRequest{})
				return err
			}}}},
		{name: "DeleteSandbox",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "os-del"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "sh-del"})
				return err
			}}}},
		{name: "DeleteSandbox missing",
			compat: side{NotFound, func(ctx context.Context) error {
				_, err := osh.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "nobody"})
				return err
			}},
			twin: []side{{NotFound, func(ctx context.Context) error {
				_, err := api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "nobody"})
				return err
			}}}},
		{name: "CreateProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{
					Metadata: &datamodelv1.ObjectMeta{Name: "os-newp"}, Type: "generic", Credentials: map[string]string{"TOKEN": "secret"}}})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "sh-newp"},
					Type: shoalv1.ProviderType_GENERIC, TypeName: "generic", Credentials: map[string]string{"TOKEN": "secret"}}})
				return err
			}}}},
		{name: "GetProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "p"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"})
				return err
			}}}},
		{name: "ListProviders",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.ListProviders(ctx, &openshellv1.ListProvidersRequest{})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.ListProviders(ctx, &shoalv1.ListProvidersRequest{})
				return err
			}}}},
		{name: "UpdateProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
					Metadata: &datamodelv1.ObjectMeta{Name: "os-upd"}, Credentials: map[string]string{"TOKEN": "rotated"}}})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Merge: true, UpdateCredentials: true, Provider: &shoalv1.Provider{
					Meta: &shoalv1.ObjectMeta{Name: "sh-upd"}, Credentials: map[string]string{"TOKEN": "rotated"}}})
				return err
			}}}},
		{name: "UpdateConfig",
			compat: side{OK, func(ctx context.Context) error {
				policy := pb(nil).entry(polNetwork, "a", networkPolicy("a", pb(nil).str(epHost, "api.example.com").num(epPort, 443)))
				_, err := osh.UpdateConfig(ctx, pb(nil).str(ucName, "os-pol").msg(ucPolicy, policy).empty())
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "sh-pol", SetEgress: &shoalv1.EgressPolicy{
					Rules: []*shoalv1.EgressRule{{Host: "api.example.com", Ports: []uint32{443}}}}})
				return err
			}}}},
		{name: "DeleteProvider",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "os-del"})
				return err
			}},
			twin: []side{{OK, func(ctx context.Context) error {
				_, err := api.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "sh-del"})
				return err
			}}}},
		{name: "DeleteProvider attached",
			compat: side{Precondition, func(ctx context.Context) error {
				_, err := osh.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "p"})
				return err
			}},
			twin: []side{{Precondition, func(ctx context.Context) error {
				_, err := api.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "p"})
				return err
			}}}},
		{name: "DeleteProvider missing",
			compat: side{OK, func(ctx context.Context) error {
				_, err := osh.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "nobody"})
				return err
			}},
			twin: []side{{NotFound, func(ctx context.Context) error {
				_, err := api.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "nobody"})
				return err
			}}}},
	}
	for _, p := range pairs {
		compat := r.calls(t, ctx, p.name+" (openshell.v1)", p.compat.code, p.compat.call)
		var twin []string
		for i, s := range p.twin {
			twin = append(twin, r.calls(t, ctx, fmt.Sprintf("%s (shoal.v1 call %d)", p.name, i+1), s.code, s.call)...)
		}
		t.Logf("%-40s openshell.v1 %d %v, shoal.v1 %d %v", p.name, len(compat), compat, len(twin), twin)
		if len(compat) != len(twin) {
			t.Errorf("%s: %d etcd requests %v through openshell.v1, %d %v through shoal.v1", p.name, len(compat), compat, len(twin), twin)
		}
	}
}
