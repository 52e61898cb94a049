package apiserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/internal/testenv"
	"shoal/store"
)

// apiOn serves the API over a fresh etcd, in process: page tokens need no
// container runtime.
func apiOn(t *testing.T) (*apiserver.Server, *store.Store) {
	t.Helper()
	c, _ := testenv.Etcd(t)
	st := store.New(c, store.Options{})
	// A registered node for placement; no runtime is needed here.
	lease, err := c.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterNode(context.Background(), store.Registration{Node: &shoalv1.Node{Name: "n1", Address: "127.0.0.1:1"}, Instance: "i1"}, lease.ID); err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.New(apiserver.Config{Store: st, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, st
}

const secretValue = "nvapi-SECRET-must-never-leak"

// listSandboxes calls srv.ListSandboxes in process and decodes its
// response as a client does: its items come encoded.
func listSandboxes(ctx context.Context, srv *apiserver.Server, req *shoalv1.ListSandboxesRequest) (*shoalv1.ListSandboxesResponse, error) {
	resp, err := srv.ListSandboxes(ctx, req)
	if err != nil {
		return resp, err
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return nil, err
	}
	out := &shoalv1.ListSandboxesResponse{}
	return out, proto.Unmarshal(b, out)
}

// A forged, altered or replayed page token is INVALID_ARGUMENT, and no
// response ever carries a provider's credential.
func TestForgedPageTokens(t *testing.T) {
	srv, st := apiOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ws := range []string{"default", "other"} {
		if _, err := srv.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
			Meta: &shoalv1.ObjectMeta{Name: "nv", Workspace: ws}, Type: shoalv1.ProviderType_NVIDIA,
			Credentials: map[string]string{"NVIDIA_API_KEY": secretValue}}}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b", "c"} {
			if _, err := srv.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
				Meta: &shoalv1.ObjectMeta{Name: n, Workspace: ws, Labels: map[string]string{"team": "ml"}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A rotated credential must not be readable at an old revision either.
	if _, err := srv.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateCredentials: true, Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "nv"}, Credentials: map[string]string{"NVIDIA_API_KEY": "rotated"}}}); err != nil {
		t.Fatal(err)
	}
	first, err := listSandboxes(ctx, srv, &shoalv1.ListSandboxesRequest{PageSize: 1, LabelSelector: "team=ml"})
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v, token %q", err, first.GetNextPageToken())
	}
	valid := first.NextPageToken
	p64, sig, _ := strings.Cut(valid, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	var fields map[string]any
	if err := json.Unmarshal(payload, &fields); err != nil {
		t.Fatalf("token payload: %v", err)
	}
	resign := func(change func(map[string]any)) string {
		f := map[string]any{}
		for k, v := range fields {
			f[k] = v
		}
		change(f)
		b, _ := json.Marshal(f)
		return base64.RawURLEncoding.EncodeToString(b) + "." + sig
	}
	unsigned := func(after string, rev int64) string {
		b, _ := json.Marshal(map[string]any{"a": after, "r": rev})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	provKey := st.ProviderKey("default", "nv")
	otherSrv, _ := apiOn(t)
	for _, ws := range []string{"default"} {
		for _, n := range []string{"x", "y"} {
			if _, err := otherSrv.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: n, Workspace: ws, Labels: map[string]string{"team": "ml"}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	foreign, err := listSandboxes(ctx, otherSrv, &shoalv1.ListSandboxesRequest{PageSize: 1, LabelSelector: "team=ml"})
	if err != nil || foreign.NextPageToken == "" {
		t.Fatalf("other cluster's first page: %v", err)
	}

	for _, tc := range []struct {
		name string
		req  *shoalv1.ListSandboxesRequest
	}{
		{"unsigned, start key before the sandbox prefix", &shoalv1.ListSandboxesRequest{PageToken: unsigned(provKey[:len(provKey)-2], 1), LabelSelector: "team=ml"}},
		{"unsigned, start key in the provider prefix", &shoalv1.ListSandboxesRequest{PageToken: unsigned("/shoal/providers/", 1)}},
		{"altered start key, old signature", &shoalv1.ListSandboxesRequest{PageToken: resign(func(f map[string]any) { f["a"] = "/shoal/providers/" }), LabelSelector: "team=ml"}},
		{"altered revision, old signature", &shoalv1.ListSandboxesRequest{PageToken: resign(func(f map[string]any) { f["r"] = 2 }), LabelSelector: "team=ml"}},
		{"altered workspace, old signature", &shoalv1.ListSandboxesRequest{PageToken: resign(func(f map[string]any) { f["w"] = "other" }), Workspace: "other", LabelSelector: "team=ml"}},
		{"valid token, other workspace", &shoalv1.ListSandboxesRequest{PageToken: valid, Workspace: "other", LabelSelector: "team=ml"}},
		{"valid token, other selector", &shoalv1.ListSandboxesRequest{PageToken: valid, LabelSelector: "team!=ml"}},
		{"valid token, no selector", &shoalv1.ListSandboxesRequest{PageToken: valid}},
		{"token of another cluster", &shoalv1.ListSandboxesRequest{PageToken: foreign.NextPageToken, LabelSelector: "team=ml"}},
		{"garbage", &shoalv1.ListSandboxesRequest{PageToken: "garbage!"}},
		{"empty signature", &shoalv1.ListSandboxesRequest{PageToken: p64 + ".", LabelSelector: "team=ml"}},
		{"huge", &shoalv1.ListSandboxesRequest{PageToken: strings.Repeat("A", 1<<20) + "." + sig}},
	} {
		resp, err := listSandboxes(ctx, srv, tc.req)
		if shoal.KindOf(err) != shoal.KindInvalid || !strings.Contains(err.Error(), "page_token") {
			t.Errorf("%s: %v (%d items); want INVALID_ARGUMENT naming page_token", tc.name, err, len(resp.GetItems()))
		}
		if b, _ := protojson.Marshal(resp); strings.Contains(string(b), secretValue) || (err != nil && strings.Contains(err.Error(), secretValue)) {
			t.Fatalf("%s: a credential leaked", tc.name)
		}
	}
	// A provider list's token does not continue a sandbox list.
	pl, err := srv.ListProviders(ctx, &shoalv1.ListProvidersRequest{PageSize: 1, Workspace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if pl.NextPageToken != "" {
		t.Fatalf("one provider in default, yet a next page")
	}
	// The valid token still works, for exactly its own list.
	rest, err := listSandboxes(ctx, srv, &shoalv1.ListSandboxesRequest{PageToken: valid, LabelSelector: "team=ml", PageSize: 10})
	if err != nil || len(rest.Items) != 2 {
		t.Fatalf("valid token: %v, %d items; want the other 2", err, len(rest.GetItems()))
	}
	for _, sb := range append(first.Items, rest.Items...) {
		if sb.Meta.Workspace != "default" {
			t.Fatalf("item from workspace %s", sb.Meta.Workspace)
		}
	}
}

// The store never lists outside the prefix, whatever continuation it is
// handed.
func TestStoreListStaysInPrefix(t *testing.T) {
	_, st := apiOn(t)
	ctx := context.Background()
	for _, after := range []string{"/shoal/providers/default/nv", "/shoal/sandboxes/", "/shoal/sandboxes/defaulu", "/", ""} {
		_, err := st.ListSandboxes(ctx, "default", store.ListOptions{After: after, Revision: 1}, nil)
		if after == "" {
			continue // no continuation: a fresh list
		}
		if shoal.KindOf(err) != shoal.KindInvalid {
			t.Errorf("after %q: %v, want invalid", after, err)
		}
	}
}

func FuzzPageToken(f *testing.F) {
	f.Add(apiserver.SignPageTokenForFuzz("/shoal/sandboxes/default/a", 7))
	f.Add("garbage!")
	f.Add("eyJhIjoiL3Nob2FsL3Byb3ZpZGVycy8iLCJyIjoxfQ")
	f.Add(".")
	f.Fuzz(func(t *testing.T, tok string) {
		// The one token the server signed is the seed: whatever the
		// fuzzer makes of it, an accepted token continues exactly there.
		after, rev, ok := apiserver.DecodePageTokenForFuzz(tok)
		if ok && tok != "" && (after != "/shoal/sandboxes/default/a" || rev != 7) {
			t.Fatalf("accepted a token the server never signed: %q → %q@%d", tok, after, rev)
		}
	})
}
