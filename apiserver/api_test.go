package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/docker"
	"shoal/internal/testenv"
	"shoal/node"
	"shoal/store"
)

// h. Bad input through the API: INVALID_ARGUMENT naming the field, nothing
// stored, no panic (nil messages included).
func TestBadInputThroughAPI(t *testing.T) {
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	meta := func(name string) *shoalv1.ObjectMeta { return &shoalv1.ObjectMeta{Name: name} }
	env := map[string]string{}
	for i := range 129 {
		env["E"+strings.Repeat("x", i)] = "v"
	}
	provs := make([]string, 33)
	for i := range provs {
		provs[i] = "p" + strings.Repeat("a", i+1)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"nil sandbox", func() error { _, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{}); return err }, "sandbox"},
		{"nil meta", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{}})
			return err
		}, "sandbox.meta"},
		{"bad name", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("-x")}})
			return err
		}, "sandbox.meta.name"},
		{"bad workspace", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a", Workspace: "A/B"}}})
			return err
		}, "sandbox.meta.workspace"},
		{"129 env", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Env: env}}})
			return err
		}, "sandbox.spec.env"},
		{"33 providers", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Providers: provs}}})
			return err
		}, "sandbox.spec.providers"},
		{"duplicate provider", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Providers: []string{"p", "p"}}}})
			return err
		}, "sandbox.spec.providers[1]"},
		{"negative memory", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{MemoryBytes: -1}}}})
			return err
		}, "sandbox.spec.resources.memory_bytes"},
		{"cpu below docker's minimum", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{CpuMillis: 5}}}})
			return err
		}, "sandbox.spec.resources.cpu_millis"},
		{"cpu overflow", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{CpuMillis: 288230376151712204}}}})
			return err
		}, "sandbox.spec.resources.cpu_millis"},
		{"memory overflow", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Resources: &shoalv1.Resources{MemoryBytes: 1 << 62}}}})
			return err
		}, "sandbox.spec.resources.memory_bytes"},
		{"image grammar", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Image: "UPPER/Case:!!"}}})
			return err
		}, "sandbox.spec.image"},
		{"image path", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Image: "../../etc/passwd"}}})
			return err
		}, "sandbox.spec.image"},
		{"NUL in annotation", func() error {
			_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a", Annotations: map[string]string{"note": "a\x00b"}}}})
			return err
		}, "sandbox.meta.annotations[note]"},
		{"NUL in config key", func() error {
			_, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: meta("p"), Type: shoalv1.ProviderType_OPENAI, Config: map[string]string{"k\x00": "v"}}})
			return err
		}, "provider.config"},
		{"update provider type 99", func() error {
			_, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Provider: &shoalv1.Provider{Meta: meta("p"), Type: 99}})
			return err
		}, "provider.type"},
		{"negative version on update", func() error {
			_, err := c.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: "a", ResourceVersion: -1})
			return err
		}, "resource_version"},
		{"negative version on provider delete", func() error {
			_, err := c.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "p", Preconditions: &shoalv1.Preconditions{ResourceVersion: -2}})
			return err
		}, "preconditions.resource_version"},
		{"exec NUL", func() error {
			stream, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: "a", Command: []string{"echo", "a\x00"}})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		}, "command[1]"},
		{"provider without type", func() error {
			_, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: meta("p")}})
			return err
		}, "provider.type"},
		{"provider bad credential key", func() error {
			_, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: meta("p"), Type: shoalv1.ProviderType_OPENAI, Credentials: map[string]string{"a-b": "x"}}})
			return err
		}, "provider.credentials"},
		{"get bad name", func() error { _, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: ""}); return err }, "name"},
		{"page size", func() error { _, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: -1}); return err }, "page_size"},
		{"page token", func() error {
			_, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageToken: "garbage!"})
			return err
		}, "page_token"},
		{"selector", func() error {
			_, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{LabelSelector: "a=b,,c"})
			return err
		}, "label_selector"},
		{"exec no command", func() error {
			stream, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: "a"})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		}, "command"},
		{"attach bad provider", func() error {
			_, err := c.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "a", Provider: "No"})
			return err
		}, "provider"},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %q", tc.name, err, tc.field)
		}
	}
	// Over the request size limit.
	big := map[string]string{"X": strings.Repeat("x", 5<<20)}
	_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: meta("a"), Spec: &shoalv1.SandboxSpec{Env: big}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized request: %v, want RESOURCE_EXHAUSTED", err)
	}
	sbs, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
	if err != nil || len(sbs.Items) != 0 {
		t.Fatalf("bad input stored sandboxes: %v %v", sbs.GetItems(), err)
	}
	ps, err := c.ListProviders(ctx, &shoalv1.ListProvidersRequest{})
	if err != nil || len(ps.Items) != 0 {
		t.Fatalf("bad input stored providers: %v %v", ps.GetItems(), err)
	}
}

// Paging returns every item once, at one revision, each the sandbox the
// store has (the API sends the cached record's bytes).
func TestListPagingAndSelector(t *testing.T) {
	testenv.RequireDocker(t)
	// The image must exist: CreateSandbox refuses a missing one at once.
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := context.Background()
	for i := range 7 {
		lbl := map[string]string{"parity": []string{"even", "odd"}[i%2]}
		_, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "s" + string(rune('a'+i)), Labels: lbl}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	var got []*shoalv1.Sandbox
	tok, pages, rev := "", 0, int64(0)
	for {
		resp, err := n.Client.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{PageSize: 2, PageToken: tok, LabelSelector: "parity=even"})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		rev = resp.ResourceVersion
		for _, sb := range resp.Items {
			if seen[sb.Meta.Name] || sb.Meta.Labels["parity"] != "even" {
				t.Fatalf("item %s repeated or wrong label", sb.Meta.Name)
			}
			seen[sb.Meta.Name] = true
			got = append(got, sb)
		}
		if tok = resp.NextPageToken; tok == "" {
			break
		}
	}
	if len(seen) != 4 || pages != 2 {
		t.Fatalf("saw %d even sandboxes over %d pages, want 4 over 2", len(seen), pages)
	}
	// At the list's revision: the agent moves the sandboxes on meanwhile.
	stored, err := n.Store().ListSandboxes(ctx, "default", store.ListOptions{Revision: rev}, func(sb *shoalv1.Sandbox) bool { return sb.Meta.Labels["parity"] == "even" })
	if err != nil || len(stored.Items) != len(got) {
		t.Fatalf("the store lists %d even sandboxes (%v), the API %d", len(stored.Items), err, len(got))
	}
	for i, sb := range got {
		if !proto.Equal(sb, stored.Items[i]) {
			t.Errorf("the API listed\n%v\nthe store has\n%v", sb, stored.Items[i])
		}
	}
}

func FuzzSelector(f *testing.F) {
	for _, s := range []string{"a=b", "a!=b,c", "!d", "x==y", "a=b,,", "k8s.io/x=1", "=", "!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		apiserver.ParseSelectorForFuzz(s)
	})
}

// Environment names that would break every process of a container (PATH,
// LD_*) or that shoal sets itself are refused as sandbox env and as
// provider credentials, at create and at update, naming the field; nothing
// is written. HOME is allowed. (Hollow runtime: no engine needed.)
func TestReservedEnvNamesRefused(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"},
		Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"TOKEN": "t"}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "SHOAL_SANDBOX", "SHOAL_WORKSPACE"} {
		refused := func(what string, err error, field string) {
			t.Helper()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) || !strings.Contains(status.Convert(err).Message(), "reserved") {
				t.Errorf("%s %s: %v; want INVALID_ARGUMENT naming %s as reserved", what, name, err, field)
			}
		}
		_, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "s"},
			Spec: &shoalv1.SandboxSpec{Env: map[string]string{name: "/x", "FINE": "v"}}}})
		refused("sandbox env", err, "sandbox.spec.env["+name+"]")
		_, err = c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "q"},
			Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{name: "/x"}}})
		refused("provider create", err, "provider.credentials["+name+"]")
		_, err = c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"},
			Credentials: map[string]string{"TOKEN": "t", name: "/x"}}, UpdateCredentials: true})
		refused("provider update", err, "provider.credentials["+name+"]")
	}
	if sbs, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{}); err != nil || len(sbs.Items) != 0 {
		t.Fatalf("refused creates stored sandboxes: %v %v", sbs.GetItems(), err)
	}
	if p, err := c.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"}); err != nil || len(p.Credentials) != 1 {
		t.Fatalf("refused updates changed the provider: %v %v", p, err)
	}
	if ps, err := c.ListProviders(ctx, &shoalv1.ListProvidersRequest{}); err != nil || len(ps.Items) != 1 {
		t.Fatalf("refused creates stored providers: %v %v", ps.GetItems(), err)
	}
	if _, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "home"},
		Spec: &shoalv1.SandboxSpec{Env: map[string]string{"HOME": "/work", "LDX": "v", "MY_PATH": "v"}}}}); err != nil {
		t.Fatalf("HOME, LDX and MY_PATH: %v", err)
	}
}

// Two providers of one sandbox that give the same credential are refused
// at create and at attach, naming both and the key; a provider update that
// adds a key another provider of one of its sandboxes gives is refused,
// naming the sandbox; nothing is written. A clash that reaches the agent
// anyway (written around the API) makes the sandbox ERROR, not a silent
// choice. (Hollow runtime.)
func TestCredentialClashRefused(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mk := func(name string, creds map[string]string) {
		t.Helper()
		if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name},
			Type: shoalv1.ProviderType_GENERIC, Credentials: creds}}); err != nil {
			t.Fatal(err)
		}
	}
	mk("a", map[string]string{"TOKEN": "from-a", "A": "a"})
	mk("b", map[string]string{"TOKEN": "from-b", "B": "b"})
	mk("c", map[string]string{"C": "c"})
	refused := func(what string, err error, want ...string) {
		t.Helper()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: %v; want FAILED_PRECONDITION", what, err)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Fatalf("%s: %q does not say %s", what, msg, w)
			}
		}
		for _, secret := range []string{"from-a", "from-b"} {
			if strings.Contains(msg, secret) {
				t.Fatalf("%s: the error holds a credential value: %s", what, msg)
			}
		}
	}
	sandbox := func(name string, provs ...string) *shoalv1.CreateSandboxRequest {
		return &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Providers: provs}}}
	}
	_, err := c.CreateSandbox(ctx, sandbox("both", "a", "b"))
	refused("create with a and b", err, "sandbox.spec.providers", `"a"`, `"b"`, `"TOKEN"`)
	if _, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "both"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused create stored a sandbox: %v", err)
	}
	if _, err := c.CreateSandbox(ctx, sandbox("s", "a", "c")); err != nil {
		t.Fatal(err)
	}
	_, err = c.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "s", Provider: "b"})
	refused("attach b to a sandbox with a", err, `"a"`, `"b"`, `"TOKEN"`)
	if sb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "s"}); err != nil || len(sb.Spec.Providers) != 2 {
		t.Fatalf("after the refused attach: %v %v", sb.GetSpec().GetProviders(), err)
	}
	update := func(name string, creds map[string]string) error {
		_, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: name}, Credentials: creds}, UpdateCredentials: true})
		return err
	}
	refused("c gains a's key A", update("c", map[string]string{"C": "c", "A": "x"}), "provider.credentials[A]", `sandbox "s"`, `provider "a"`)
	if p, err := c.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "c"}); err != nil || len(p.Credentials) != 1 {
		t.Fatalf("the refused update changed c: %v %v", p.GetCredentials(), err)
	}
	if err := update("c", map[string]string{"C": "c2", "D": "d"}); err != nil {
		t.Fatalf("a key nobody else gives: %v", err)
	}
	if err := update("b", map[string]string{"TOKEN": "from-b", "B": "b", "A": "b"}); err != nil {
		t.Fatalf("b is attached nowhere: %v", err)
	}
	// Around the API: c gains TOKEN in the store, and a sandbox with a and
	// c is stored without the API's check; its agent refuses to choose.
	st := n.Store()
	if _, err := st.UpdateProvider(ctx, "default", "c", store.Preconditions{}, func(p *shoalv1.Provider) error {
		p.Credentials["TOKEN"] = "from-c"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandboxOn(ctx, &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "raced"}, Spec: &shoalv1.SandboxSpec{Image: docker.DefaultImage, Providers: []string{"a", "c"}}, Status: &shoalv1.SandboxStatus{}},
		store.Placement{}, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the raced sandbox is ERROR", func() (bool, error) {
		sb, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "raced"})
		if err != nil {
			return false, err
		}
		msg := sb.Status.GetMessage()
		return sb.Status.GetPhase() == shoalv1.SandboxPhase_ERROR && strings.Contains(msg, `"TOKEN"`) && strings.Contains(msg, `"a"`) && strings.Contains(msg, `"c"`),
			fmt.Errorf("phase %s: %s", sb.Status.GetPhase(), msg)
	})
}

// UpdateProvider keeps the stored annotations unless update_annotations is
// set, whatever the request holds (as for labels, config and credentials),
// and with it replaces them, validated like a create's.
func TestUpdateProviderAnnotations(t *testing.T) {
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	n := testenv.StartNode(t, cfg)
	c := n.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p", Annotations: map[string]string{"owner": "ml-team"}},
		Type: shoalv1.ProviderType_GENERIC, Credentials: map[string]string{"TOKEN": "t"}}}); err != nil {
		t.Fatal(err)
	}
	annotations := func() map[string]string {
		t.Helper()
		p, err := c.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		return p.Meta.Annotations
	}
	up, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateLabels: true, Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p", Labels: map[string]string{"tier": "a"}, Annotations: map[string]string{"ignored": "x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := annotations(); len(got) != 1 || got["owner"] != "ml-team" || up.Meta.Annotations["owner"] != "ml-team" {
		t.Fatalf("after a label update: %v (response %v); want the stored annotations kept", got, up.Meta.Annotations)
	}
	if _, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateAnnotations: true, Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p", Annotations: map[string]string{"owner": "infra", "ticket": "OPS-12"}}}}); err != nil {
		t.Fatal(err)
	}
	if got := annotations(); len(got) != 2 || got["owner"] != "infra" || got["ticket"] != "OPS-12" {
		t.Fatalf("after update_annotations: %v; want them replaced", got)
	}
	_, err = c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateAnnotations: true, Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p", Annotations: map[string]string{"note": "a\x00b"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "provider.meta.annotations[note]") {
		t.Fatalf("a NUL in an annotation: %v", err)
	}
	if _, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateAnnotations: true, Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"}}}); err != nil {
		t.Fatal(err)
	}
	if got := annotations(); len(got) != 0 {
		t.Fatalf("after update_annotations with none: %v; want none", got)
	}
}
