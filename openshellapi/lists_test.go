package openshellapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
)

// Offset paging over 250 sandboxes: pages of limit in creation order, no
// sandbox twice or missing; selectors and the workspace rules.
func TestListPaging(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := ctxT(t, 3*time.Minute)
	const n = 250
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			labels := map[string]string{"parity": fmt.Sprint(i % 2)}
			_, err := c.os[i%3].CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: fmt.Sprintf("p%03d", i), Labels: labels, Spec: &openshellv1.SandboxSpec{}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.os[0].CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "elsewhere", Workspace: "other", Spec: &openshellv1.SandboxSpec{}}); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	var prev *openshellv1.Sandbox
	for i, want := range []int{100, 100, 50, 0} {
		r, err := c.os[(i+1)%3].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 100, Offset: uint32(100 * i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Sandboxes) != want {
			t.Fatalf("page %d: %d sandboxes, want %d", i, len(r.Sandboxes), want)
		}
		for _, sb := range r.Sandboxes {
			m := sb.Metadata
			if seen[m.Name] || m.Workspace != "default" {
				t.Fatalf("page %d: %s/%s twice or from another workspace", i, m.Workspace, m.Name)
			}
			seen[m.Name] = true
			if prev != nil {
				pm := prev.Metadata
				if pm.CreatedAtMs > m.CreatedAtMs || pm.CreatedAtMs == m.CreatedAtMs && pm.Name > m.Name {
					t.Fatalf("%s (%d) listed after %s (%d): not in creation order", m.Name, m.CreatedAtMs, pm.Name, pm.CreatedAtMs)
				}
			}
			prev = sb
		}
	}
	if len(seen) != n {
		t.Fatalf("%d sandboxes over the pages, want %d", len(seen), n)
	}
	r, err := c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
	if err != nil || len(r.Sandboxes) != 100 {
		t.Fatalf("limit 0: %d sandboxes, %v; want 100", len(r.Sandboxes), err)
	}
	r, err = c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 1000, LabelSelector: "parity=1"})
	if err != nil || len(r.Sandboxes) != n/2 {
		t.Fatalf("selector parity=1: %d sandboxes, %v; want %d", len(r.Sandboxes), err, n/2)
	}
	for _, sb := range r.Sandboxes {
		if sb.Metadata.Labels["parity"] != "1" {
			t.Fatalf("selector parity=1 listed %v", sb.Metadata)
		}
	}
	r, err = c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 1000, AllWorkspaces: true})
	if err != nil || len(r.Sandboxes) != n+1 {
		t.Fatalf("all_workspaces: %d sandboxes, %v; want %d", len(r.Sandboxes), err, n+1)
	}
	_, err = c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true, Workspace: "other"})
	wantCode(t, "all_workspaces with a workspace", err, codes.InvalidArgument, "all_workspaces")
	_, err = c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{LabelSelector: "a=b=c,"})
	wantCode(t, "bad selector", err, codes.InvalidArgument, "label_selector")
	r, err = c.os[0].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Workspace: "other"})
	if err != nil || len(r.Sandboxes) != 1 {
		t.Fatalf("workspace other: %v %v", r, err)
	}
	pl, err := c.os[0].ListProviders(ctx, &openshellv1.ListProvidersRequest{AllWorkspaces: true, Workspace: "x"})
	wantCode(t, "providers: all_workspaces with a workspace", err, codes.InvalidArgument, "all_workspaces")
	_ = pl

	// A list sends each sandbox as GetSandbox does (a node keeps the
	// encoding it sent with each record), and one that changed as it is
	// now: the kept encoding goes with the version it was made of.
	for round := range 2 {
		for i := range c.os {
			r, err := c.os[i].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 5, Offset: 10})
			if err != nil || len(r.Sandboxes) != 5 {
				t.Fatalf("round %d, node %d: %d sandboxes, %v", round, i, len(r.GetSandboxes()), err)
			}
			for _, sb := range r.Sandboxes {
				if round == 1 && sb.Metadata.Labels["round"] != "1" {
					t.Fatalf("node %d listed %s as it was before its update: %v", i, sb.Metadata.Name, sb.Metadata)
				}
				g, err := c.os[i].GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: sb.Metadata.Name})
				if err != nil {
					t.Fatal(err)
				}
				if g.Sandbox.Metadata.ResourceVersion == sb.Metadata.ResourceVersion && !proto.Equal(g.Sandbox, sb) {
					t.Fatalf("node %d: listed %v\nget %v", i, sb, g.Sandbox)
				}
				if round == 0 && i == 0 {
					if _, err := c.nodes[0].Client.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{Name: sb.Metadata.Name, SetLabels: map[string]string{"round": "1"}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// A page that would not fit one response is refused, saying how many do
// (OpenShell's list has no token to end a page early, and a short page
// would read as the list's end); a smaller limit answers.
func TestListPageTooLargeForAResponse(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := ctxT(t, 3*time.Minute)
	big := strings.Repeat("x", 60<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 140)
	for i := range 140 {
		wg.Go(func() {
			_, err := c.os[0].CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: fmt.Sprintf("big%03d", i), Annotations: map[string]string{"note": big}, Spec: &openshellv1.SandboxSpec{}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.os[1].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 1000})
	wantCode(t, "a list of 140 × 60 KiB", err, codes.ResourceExhausted, "limit")
	page, err := c.os[1].ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 50})
	if err != nil || len(page.Sandboxes) != 50 {
		t.Fatalf("a page of 50: %d %v", len(page.GetSandboxes()), err)
	}
}
