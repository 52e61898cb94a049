package openshellapi_test

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// Providers: the free type round-trips, every read redacts, the update
// merges and checks its version, attach and detach are no-ops where
// OpenShell's are, and the delete answers as OpenShell's does.
func TestProviders(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := ctxT(t, 3*time.Minute)
	a, b := c.os[0], c.os[1]

	_, err := a.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "gitlab",
		CredentialHandles: map[string]*datamodelv1.CredentialHandle{"T": {Driver: "x"}}}})
	wantCode(t, "credential_handles", err, codes.InvalidArgument, "provider.credential_handles")
	_, err = a.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "x"}}})
	wantCode(t, "no type", err, codes.InvalidArgument, "provider.type")
	_, err = a.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "gitlab", Credentials: map[string]string{"1BAD": "v"}}})
	wantCode(t, "bad credential name", err, codes.InvalidArgument, "provider.credentials")

	gen, err := a.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "Claude Code/v2"}})
	if err != nil || gen.Provider.Metadata.Name == "" || gen.Provider.Type != "Claude Code/v2" || gen.Provider.Metadata.Workspace != "default" {
		t.Fatalf("a provider without a name: %v %v", gen, err)
	}
	cr, err := a.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata:    &datamodelv1.ObjectMeta{Name: "gl", Labels: map[string]string{"team": "x"}},
		Type:        "gitlab",
		Credentials: map[string]string{"GITLAB_TOKEN": "glpat-secret", "OTHER": "s2"},
		Config:      map[string]string{"url": "https://gitlab.example", "keep": "k"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redacted := func(what string, p *datamodelv1.Provider, keys ...string) {
		t.Helper()
		if len(p.Credentials) != len(keys) {
			t.Fatalf("%s: credentials %v, want keys %v", what, p.Credentials, keys)
		}
		for _, k := range keys {
			if p.Credentials[k] != "REDACTED" {
				t.Fatalf("%s: credential %s is %q, want REDACTED", what, k, p.Credentials[k])
			}
		}
	}
	redacted("create", cr.Provider, "GITLAB_TOKEN", "OTHER")
	got, err := b.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gl"})
	if err != nil || got.Provider.Type != "gitlab" || got.Provider.Metadata.Id == "" || got.Provider.Metadata.ResourceVersion == 0 {
		t.Fatalf("get: %v %v", got, err)
	}
	redacted("get", got.Provider, "GITLAB_TOKEN", "OTHER")
	list, err := b.ListProviders(ctx, &openshellv1.ListProvidersRequest{})
	if err != nil || len(list.Providers) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	for _, p := range list.Providers {
		if p.Metadata.Name == "gl" {
			redacted("list", p, "GITLAB_TOKEN", "OTHER")
		}
	}
	// shoal.v1 sees shoal's nearest type, and the name kept.
	sp, err := c.nodes[2].Client.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "gl"})
	if err != nil || sp.Type != shoalv1.ProviderType_GENERIC || sp.TypeName != "gitlab" {
		t.Fatalf("through shoal.v1: %v %v", sp, err)
	}

	// Update merges; a stale resource_version is ABORTED naming the current one.
	rv := got.Provider.Metadata.ResourceVersion
	up, err := b.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata:    &datamodelv1.ObjectMeta{Name: "gl", ResourceVersion: rv},
		Credentials: map[string]string{"NEW": "n", "OTHER": ""},
		Config:      map[string]string{"url": "https://gitlab.other", "keep": "", "added": "a"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redacted("update", up.Provider, "GITLAB_TOKEN", "NEW")
	if want := map[string]string{"url": "https://gitlab.other", "added": "a"}; !maps.Equal(up.Provider.Config, want) {
		t.Fatalf("merged config %v, want %v", up.Provider.Config, want)
	}
	_, err = b.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "gl", ResourceVersion: rv}, Config: map[string]string{"x": "y"}}})
	wantCode(t, "stale resource_version", err, codes.Aborted, fmt.Sprint(up.Provider.Metadata.ResourceVersion))
	// An empty update changes nothing; a credential sent back REDACTED keeps its value.
	same, err := a.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "gl"}, Type: "gitlab", Credentials: map[string]string{"GITLAB_TOKEN": "REDACTED"}}})
	if err != nil || same.Provider.Metadata.ResourceVersion != up.Provider.Metadata.ResourceVersion {
		t.Fatalf("an update that changes nothing: %v %v (was at %d)", same, err, up.Provider.Metadata.ResourceVersion)
	}
	_, err = a.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "gl"}, Type: "github"}})
	wantCode(t, "type change", err, codes.InvalidArgument, "provider.type")
	_, err = a.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "gl"}},
		CredentialExpiresAtMs: map[string]int64{"NEW": 1}})
	wantCode(t, "credential expiry", err, codes.InvalidArgument, "credential_expires_at_ms")
	_, err = a.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "missing"}, Config: map[string]string{"a": "b"}}})
	wantCode(t, "update of a missing provider", err, codes.NotFound)
	// The stored credentials are the merge's, in plaintext where a
	// container gets them: shoal.v1 shows the keys.
	sp, err = c.nodes[2].Client.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "gl"})
	if err != nil || len(sp.Credentials) != 2 || sp.Credentials["NEW"] == "" || sp.Credentials["GITLAB_TOKEN"] == "" {
		t.Fatalf("stored after merge: %v %v", sp, err)
	}

	// Attach and detach.
	if _, err := a.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "s", Spec: &openshellv1.SandboxSpec{}}); err != nil {
		t.Fatal(err)
	}
	s, err := b.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "s", ProviderName: "nope"})
	wantCode(t, "attach a missing provider", err, codes.FailedPrecondition, "nope")
	_, err = b.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "nope", ProviderName: "gl"})
	wantCode(t, "attach to a missing sandbox", err, codes.NotFound)
	_, err = b.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl", ExpectedResourceVersion: s.Sandbox.Metadata.ResourceVersion - 1})
	wantCode(t, "attach at a stale version", err, codes.Aborted, "resource_version")
	at, err := b.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl"})
	if err != nil || !at.Attached || len(at.Sandbox.Spec.Providers) != 1 {
		t.Fatalf("attach: %v %v", at, err)
	}
	again, err := c.os[2].AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl"})
	if err != nil || again.Attached {
		t.Fatalf("attach again: %v %v, want attached=false", again, err)
	}
	_, err = b.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl", ExpectedResourceVersion: s.Sandbox.Metadata.ResourceVersion})
	// The message names the current version: the one attach answered, or
	// a later one if the owner wrote the status since.
	wantCode(t, "detach at a stale version", err, codes.Aborted, "resource_version")
	msg := status.Convert(err).Message()
	m := regexp.MustCompile(`is at resource_version (\d+)`).FindStringSubmatch(msg)
	if cur, _ := strconv.ParseUint(append(m, "", "")[1], 10, 64); cur < again.Sandbox.Metadata.ResourceVersion {
		t.Fatalf("detach at a stale version: %q names no current version at or after %d", msg, again.Sandbox.Metadata.ResourceVersion)
	}
	lsp, err := c.os[2].ListSandboxProviders(ctx, &openshellv1.ListSandboxProvidersRequest{SandboxName: "s"})
	if err != nil || len(lsp.Providers) != 1 || lsp.Providers[0].Metadata.Name != "gl" {
		t.Fatalf("ListSandboxProviders: %v %v", lsp, err)
	}
	redacted("ListSandboxProviders", lsp.Providers[0], "GITLAB_TOKEN", "NEW")
	_, err = a.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gl"})
	wantCode(t, "delete an attached provider", err, codes.FailedPrecondition, "sandbox(es): s")
	// At the version last read, as a client does: read again and retry
	// when the owner wrote the status meanwhile (it syncs the sandbox's
	// credential files after the attach; CI saw that write land between).
	var dt *openshellv1.DetachSandboxProviderResponse
	ver := again.Sandbox.Metadata.ResourceVersion
	testenv.Eventually(t, 30*time.Second, "detach at the sandbox's current version", func() error {
		dt, err = b.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl", ExpectedResourceVersion: ver})
		if status.Code(err) == codes.Aborted {
			cur, gerr := b.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "s"})
			if gerr != nil {
				return gerr
			}
			ver = cur.Sandbox.Metadata.ResourceVersion
			return err
		}
		return nil
	})
	if err != nil || !dt.Detached || len(dt.Sandbox.Spec.Providers) != 0 {
		t.Fatalf("detach: %v %v", dt, err)
	}
	dt, err = b.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "s", ProviderName: "gl"})
	if err != nil || dt.Detached {
		t.Fatalf("detach again: %v %v, want detached=false", dt, err)
	}
	_, err = b.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "s", ProviderName: "nope"})
	wantCode(t, "detach a missing provider", err, codes.FailedPrecondition, "nope")
	_, err = b.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: "nope", ProviderName: "gl"})
	wantCode(t, "detach from a missing sandbox", err, codes.NotFound)

	// Delete: done; missing is deleted=false.
	d, err := a.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gl"})
	if err != nil || !d.Deleted {
		t.Fatalf("delete: %v %v", d, err)
	}
	d, err = a.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gl"})
	if err != nil || d.Deleted {
		t.Fatalf("delete a missing provider: %v %v, want deleted=false", d, err)
	}
	_, err = b.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gl"})
	wantCode(t, "get a deleted provider", err, codes.NotFound)
}
