package store_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
	"shoal/store"
)

// ListSandboxesEncoded's items decode to ListSandboxes's items, from the
// watch cache and from etcd, page by page and with a filter: records as
// the store writes them, one stored with a resource version and unknown
// fields (written by another version), and a corrupt one (skipped by
// both, with the same warning).
func TestListEncodedDecodesAsList(t *testing.T) {
	t.Parallel()
	raw, srv := testenv.Etcd(t)
	ctx := ctxT(t)
	cached, _, _ := cachedNode(t, "http://"+srv.Endpoint())
	uncached := store.New(raw, store.Options{})
	for i := range 7 {
		sb := sandbox(fmt.Sprintf("e%d", i))
		sb.Spec.Command = []string{"sleep", "1"}
		sb.Meta.Labels["i"] = fmt.Sprint(i % 2)
		sb.Meta.Annotations = map[string]string{"note": "<b>&</b> ✓"}
		sb.Spec.Env = map[string]string{"A": "1", "B": ""}
		sb.Status = &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Conditions: []*shoalv1.Condition{{Type: "NodeLost", LastTransitionTime: timestamppb.Now()}}}
		if _, err := cached.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	other := &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "other", Workspace: "default", Uid: "u", ResourceVersion: 99, Labels: map[string]string{"i": "1"}}}
	b, err := proto.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 7)
	if _, err := raw.Put(ctx, cached.SandboxKey("default", "other"), string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, cached.SandboxKey("default", "corrupt"), "\xff not protobuf"); err != nil {
		t.Fatal(err)
	}
	if _, err := cached.GetSandbox(ctx, "default", "other"); err != nil {
		t.Fatal(err) // the cache has them now
	}
	odd := func(sb *shoalv1.Sandbox) bool { return sb.Meta.Labels["i"] == "1" }
	for name, s := range map[string]*store.Store{"cache": cached, "etcd": uncached} {
		for _, keep := range []func(*shoalv1.Sandbox) bool{nil, odd} {
			o, eo := store.ListOptions{Limit: 3}, store.ListOptions{Limit: 3}
			n := 0
			for {
				page, err := s.ListSandboxes(ctx, "default", o, keep)
				if err != nil {
					t.Fatal(err)
				}
				epage, err := s.ListSandboxesEncoded(ctx, "default", eo, keep)
				if err != nil {
					t.Fatal(err)
				}
				if len(epage.Items) != len(page.Items) || epage.Revision != page.Revision || fmt.Sprint(epage.Warnings) != fmt.Sprint(page.Warnings) {
					t.Fatalf("%s: encoded page of %d items at %d, warnings %q; decoded %d at %d, %q", name,
						len(epage.Items), epage.Revision, epage.Warnings, len(page.Items), page.Revision, page.Warnings)
				}
				for i, want := range page.Items {
					got := &shoalv1.Sandbox{}
					if err := proto.Unmarshal(epage.Items[i], got); err != nil {
						t.Fatal(err)
					}
					if !proto.Equal(got, want) {
						t.Errorf("%s: encoded item decodes to\n%v\nwant\n%v", name, got, want)
					}
					n++
				}
				if (page.Next == nil) != (epage.Next == nil) {
					t.Fatalf("%s: next %v, encoded next %v", name, page.Next, epage.Next)
				}
				if page.Next == nil {
					break
				}
				o, eo = *page.Next, *epage.Next
			}
			if want := map[bool]int{true: 8, false: 4}[keep == nil]; n != want {
				t.Errorf("%s: %d items, want %d", name, n, want)
			}
		}
	}
}
