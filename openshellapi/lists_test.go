package openshellapi_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	openshellv1 "shoal/api/openshell/v1"
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
}
