package apiserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
	"shoal/internal/testenv"
	"shoal/store"
)

// The member calls against one real member: its status, input checked
// before etcd is asked, names and hex ids, and the last voter kept.
func TestMemberCallsOnOneMember(t *testing.T) {
	c, srv := testenv.Etcd(t)
	cs := apiserver.NewCluster(apiserver.ClusterConfig{Store: store.New(c, store.Options{}), Etcd: c, EtcdMember: srv.Endpoint()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	st, err := cs.Status(ctx, &shoalv1.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 1 || !st.Members[0].Healthy || !st.Members[0].Leader || st.Members[0].RaftTerm == 0 || st.LeaderNode != "" || st.ClusterId == "" {
		t.Fatalf("status of one member, nobody leading shoal: %v", st)
	}
	self := st.Members[0]

	for _, tc := range []struct {
		name  string
		req   *shoalv1.AddMemberRequest
		field string
	}{
		{"no name", &shoalv1.AddMemberRequest{PeerUrls: []string{"http://127.0.0.1:1"}}, "name"},
		{"bad name", &shoalv1.AddMemberRequest{Name: "a,b", PeerUrls: []string{"http://127.0.0.1:1"}}, "name"},
		{"no URL", &shoalv1.AddMemberRequest{Name: "n2"}, "peer_urls"},
		{"bad URL", &shoalv1.AddMemberRequest{Name: "n2", PeerUrls: []string{"127.0.0.1:1"}}, "peer_urls[0]"},
		{"unspecified", &shoalv1.AddMemberRequest{Name: "n2", PeerUrls: []string{"http://127.0.0.1:1", "http://0.0.0.0:1"}}, "peer_urls[1]"},
	} {
		_, err := cs.AddMember(ctx, tc.req)
		var e *shoal.Error
		if !errors.As(err, &e) || e.Kind != shoal.KindInvalid || e.Field != tc.field {
			t.Errorf("%s: %v; want invalid %s", tc.name, err, tc.field)
		}
	}
	if _, err := cs.AddMember(ctx, &shoalv1.AddMemberRequest{Name: "other", PeerUrls: self.PeerUrls}); shoal.KindOf(err) != shoal.KindAlreadyExists {
		t.Errorf("add with a member's peer URL: %v; want already exists", err)
	}

	for _, name := range []string{self.Name, self.Id} {
		_, err := cs.RemoveMember(ctx, &shoalv1.RemoveMemberRequest{Name: name})
		if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "last voting member") {
			t.Errorf("remove the last voter as %q: %v", name, err)
		}
	}
	if _, err := cs.RemoveMember(ctx, &shoalv1.RemoveMemberRequest{Name: "nosuch"}); shoal.KindOf(err) != shoal.KindNotFound {
		t.Errorf("remove a missing member: %v", err)
	}
	if _, err := cs.PromoteMember(ctx, &shoalv1.PromoteMemberRequest{}); shoal.KindOf(err) != shoal.KindInvalid {
		t.Errorf("promote with no name: %v", err)
	}
	if ms, err := cs.PromoteMember(ctx, &shoalv1.PromoteMemberRequest{Name: self.Id}); err != nil || len(ms.Members) != 1 {
		t.Errorf("promote a voter: %v, %v; want no change", ms, err)
	}
}
