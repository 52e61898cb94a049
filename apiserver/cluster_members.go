package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/embedetcd"
	"shoal/etcdmember"
	"shoal/lease"
)

// The etcd members: their health, membership changes, and snapshots.
// Every call goes through the node's etcd client, so any node answers for
// the whole cluster.

// memberStatusTimeout bounds each member's status call in Status, so that
// a member that is down costs the answer this long and no longer.
const memberStatusTimeout = 2 * time.Second

// RetryTimeout bounds how long AddMember and PromoteMember retry while
// etcd refuses for a passing reason (retryEtcd), when the caller's
// deadline is later or unset.
const RetryTimeout = 30 * time.Second

// SnapshotChunkBytes is the most data one SnapshotChunk carries.
const SnapshotChunkBytes = 64 << 10

// Status reports every member's health as its own endpoint answers it,
// and shoal's leader.
func (s *ClusterServer) Status(ctx context.Context, _ *shoalv1.ClusterStatusRequest) (*shoalv1.ClusterStatus, error) {
	members, err := s.memberList(ctx, true)
	if err != nil {
		return nil, err
	}
	out := &shoalv1.ClusterStatus{Members: make([]*shoalv1.Member, len(members))}
	statuses := make([]*clientv3.StatusResponse, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out.Members[i] = memberProto(m)
		if len(m.ClientURLs) == 0 {
			out.Members[i].Error = "not started: the member was added but has not joined yet"
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
			defer cancel()
			st, err := s.cfg.Etcd.Status(sctx, m.ClientURLs[0])
			switch {
			case err != nil:
				out.Members[i].Error = fmt.Sprintf("no answer from %s: %v", m.ClientURLs[0], err)
			case len(st.Errors) > 0:
				out.Members[i].Error = strings.Join(st.Errors, "; ")
			case st.Leader == 0:
				out.Members[i].Error = "the member sees no raft leader"
			default:
				out.Members[i].Healthy = true
			}
			statuses[i] = st
		})
	}
	wg.Wait()
	// The raft leader as the members with the latest term see it.
	var leader, term uint64
	for i, st := range statuses {
		if st == nil {
			continue
		}
		m := out.Members[i]
		m.RaftTerm, m.RaftIndex, m.DbSize = st.RaftTerm, st.RaftIndex, st.DbSize
		if st.RaftTerm >= term && st.Leader != 0 {
			leader, term = st.Leader, st.RaftTerm
		}
	}
	for i, m := range members {
		out.Members[i].Leader = leader != 0 && m.ID == leader
	}

	// Without a quorum, the leader as this node's member last knew it is
	// better than no status at all.
	t, ok, err := s.leader(ctx)
	if err != nil {
		t, ok, err = s.leader(ctx, clientv3.WithSerializable())
	}
	if err != nil {
		s.log.Warn("cluster status: shoal's leader not read", "err", err)
	}
	if ok {
		out.LeaderNode, out.FencingToken = t.Node, t.Fence
		if !t.Since.IsZero() {
			out.LeaderSince = timestamppb.New(t.Since)
		}
		if !t.Synced.IsZero() {
			out.LeaderSynced = timestamppb.New(t.Synced)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	out.ClusterId, _ = s.cfg.Store.ClusterID(cctx) // empty when etcd has no quorum
	return out, nil
}

// statusReadTimeout bounds each cluster-wide read of Status, which must
// answer also when etcd has lost its quorum.
const statusReadTimeout = 2 * time.Second

func (s *ClusterServer) leader(ctx context.Context, opts ...clientv3.OpOption) (lease.Term, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	return lease.Current(ctx, s.cfg.Etcd, s.cfg.Store.LeaderPrefix(), s.cfg.Store.LeaderTermKey(), opts...)
}

// ListMembers lists the etcd members (etcd's member list, without health).
func (s *ClusterServer) ListMembers(ctx context.Context, _ *shoalv1.ListMembersRequest) (*shoalv1.ListMembersResponse, error) {
	return s.listMembers(ctx)
}

func (s *ClusterServer) listMembers(ctx context.Context) (*shoalv1.ListMembersResponse, error) {
	members, err := s.memberList(ctx, false)
	if err != nil {
		return nil, err
	}
	out := &shoalv1.ListMembersResponse{Members: make([]*shoalv1.Member, len(members))}
	for i, m := range members {
		out.Members[i] = memberProto(m)
	}
	return out, nil
}

// AddMember adds a member, a learner unless req.Voter. A member with the
// same name and peer URLs, or an unstarted one with the same peer URLs, is
// returned as if added now: a node that died between its --join's
// AddMember and its first start joins again with the same request.
func (s *ClusterServer) AddMember(ctx context.Context, req *shoalv1.AddMemberRequest) (*shoalv1.AddMemberResponse, error) {
	peers, err := validNewMember(req.GetName(), req.GetPeerUrls())
	if err != nil {
		return nil, err
	}
	members, err := s.memberList(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		same := sameURLs(m.PeerURLs, peers)
		if same && (m.Name == req.GetName() || m.Name == "") {
			return addResponse(members, m.ID, req.GetName()), nil
		}
		if m.Name == req.GetName() {
			return nil, shoal.AlreadyExists("etcd member %q exists already (id %x, peer URLs %s); remove it first with `shoal cluster member remove %s`",
				m.Name, m.ID, strings.Join(m.PeerURLs, ","), m.Name)
		}
		for _, u := range peers {
			if slices.Contains(m.PeerURLs, u) {
				return nil, shoal.AlreadyExists("peer URL %s belongs to etcd member %s (id %x) already", u, memberName(m), m.ID)
			}
		}
	}
	// etcd adds a member only once every voter has been connected for a
	// while (its strict reconfiguration check): right after a voter
	// started, or while one is down, it answers "unhealthy cluster".
	var resp *clientv3.MemberAddResponse
	err = retryEtcd(ctx, rpctypes.ErrUnhealthy, func(ctx context.Context) (err error) {
		if req.GetVoter() {
			resp, err = s.cfg.Etcd.MemberAdd(ctx, peers)
		} else {
			resp, err = s.cfg.Etcd.MemberAddAsLearner(ctx, peers)
		}
		return err
	})
	if errors.Is(err, errStillRefused) {
		return nil, shoal.Unavailable("add etcd member %s: etcd still reports an unhealthy cluster after %s: it adds members only while every voter is up and connected; check `shoal cluster status`, then retry",
			req.GetName(), RetryTimeout)
	}
	if err != nil {
		return nil, etcdError(ctx, "add etcd member "+req.GetName(), err)
	}
	s.log.Info("etcd member added", "name", req.GetName(), "id", fmt.Sprintf("%x", resp.Member.ID), "learner", !req.GetVoter())
	return addResponse(resp.Members, resp.Member.ID, req.GetName()), nil
}

// addResponse is the new member and the initial cluster it starts with:
// every member's peer URLs, as `etcdctl member add` prints them. etcd
// matches the members of an existing cluster by peer URL, so a member not
// started yet (no name) gets its id as a placeholder name.
func addResponse(members []*etcdserverpb.Member, id uint64, name string) *shoalv1.AddMemberResponse {
	out := &shoalv1.AddMemberResponse{}
	var ic etcdmember.InitialCluster
	for _, m := range members {
		n := memberName(m)
		if m.ID == id {
			n = name
			out.Member = memberProto(m)
			out.Member.Name = name
		}
		for _, u := range m.PeerURLs {
			ic = append(ic, etcdmember.Peer{Name: n, URL: u})
		}
	}
	out.InitialCluster = ic.String()
	return out
}

// RemoveMember removes a member by name or hex id. The last voter is kept:
// without it nothing holds the data.
func (s *ClusterServer) RemoveMember(ctx context.Context, req *shoalv1.RemoveMemberRequest) (*shoalv1.ListMembersResponse, error) {
	members, err := s.memberList(ctx, false)
	if err != nil {
		return nil, err
	}
	m, err := findMember(members, req.GetName())
	if err != nil {
		return nil, err
	}
	voters := 0
	for _, o := range members {
		if !o.IsLearner {
			voters++
		}
	}
	if !m.IsLearner && voters == 1 {
		return nil, shoal.FailedPrecondition("etcd member %s (id %x) is the cluster's last voting member: removing it would leave nothing holding the data; add and promote another member first",
			memberName(m), m.ID)
	}
	if _, err := s.cfg.Etcd.MemberRemove(ctx, m.ID); err != nil {
		return nil, etcdError(ctx, "remove etcd member "+memberName(m), err)
	}
	s.log.Info("etcd member removed", "name", m.Name, "id", fmt.Sprintf("%x", m.ID))
	return s.listMembers(ctx)
}

// PromoteMember makes a learner a voter. etcd refuses until the learner
// has caught up with the leader, so the call retries until then, within
// the caller's deadline and RetryTimeout. A voter is left as it is.
func (s *ClusterServer) PromoteMember(ctx context.Context, req *shoalv1.PromoteMemberRequest) (*shoalv1.ListMembersResponse, error) {
	members, err := s.memberList(ctx, false)
	if err != nil {
		return nil, err
	}
	m, err := findMember(members, req.GetName())
	if err != nil {
		return nil, err
	}
	if m.IsLearner {
		if err := s.promote(ctx, m); err != nil {
			return nil, err
		}
	}
	return s.listMembers(ctx)
}

func (s *ClusterServer) promote(ctx context.Context, m *etcdserverpb.Member) error {
	start := time.Now()
	err := retryEtcd(ctx, rpctypes.ErrMemberLearnerNotReady, func(ctx context.Context) error {
		_, err := s.cfg.Etcd.MemberPromote(ctx, m.ID)
		return err
	})
	if errors.Is(err, errStillRefused) {
		return shoal.Unavailable("etcd member %s (id %x) has not caught up with the leader within %s: etcd promotes a learner only once it is in sync; retry later",
			memberName(m), m.ID, RetryTimeout)
	}
	if err != nil {
		return etcdError(ctx, "promote etcd member "+memberName(m), err)
	}
	s.log.Info("etcd member promoted", "name", m.Name, "id", fmt.Sprintf("%x", m.ID), "after", time.Since(start))
	return nil
}

// errStillRefused: etcd kept refusing for RetryTimeout.
var errStillRefused = errors.New("etcd still refuses")

// retryEtcd runs op until etcd stops refusing it with refusal, within
// the caller's deadline and RetryTimeout, backing off up to a second.
// etcd refuses membership changes for passing reasons (a learner not
// caught up yet, a voter connected too recently) that only time mends.
func retryEtcd(ctx context.Context, refusal error, op func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, RetryTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		err := op(rctx)
		if err == nil || !errors.Is(rpctypes.Error(err), refusal) {
			if err != nil && rctx.Err() != nil && ctx.Err() == nil {
				return errStillRefused
			}
			return err
		}
		select {
		case <-rctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errStillRefused
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// Snapshot streams an etcd snapshot of the node's own member (any member
// on a node without one), in chunks of SnapshotChunkBytes. The stream ends
// with the checksum etcd appends, which a restore verifies.
func (s *ClusterServer) Snapshot(_ *shoalv1.SnapshotRequest, stream grpc.ServerStreamingServer[shoalv1.SnapshotChunk]) error {
	ctx := stream.Context()
	c := s.cfg.Etcd
	if s.cfg.EtcdMember != "" {
		own, err := embedetcd.Dial([]string{s.cfg.EtcdMember}, embedetcd.WithTLS(s.cfg.Transport.ClientTLS()))
		if err != nil {
			return shoal.Unavailable("this node's etcd member: %v", err)
		}
		defer own.Close()
		c = own
	}
	rc, err := c.Snapshot(ctx)
	if err != nil {
		return etcdError(ctx, "etcd snapshot", err)
	}
	defer rc.Close()
	buf := make([]byte, SnapshotChunkBytes)
	total := 0
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if serr := stream.Send(&shoalv1.SnapshotChunk{Data: buf[:n]}); serr != nil {
				return serr
			}
			total += n
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			s.log.Info("etcd snapshot sent", "bytes", total)
			return nil
		}
		if err != nil {
			return etcdError(ctx, "etcd snapshot", err)
		}
	}
}

// memberList is etcd's member list, linearizable. For Status (fallback),
// a member list any member serves on its own is better than none: with
// the quorum lost, the status is what the operator needs.
func (s *ClusterServer) memberList(ctx context.Context, fallback bool) ([]*etcdserverpb.Member, error) {
	lctx, cancel := ctx, context.CancelFunc(func() {})
	if fallback {
		lctx, cancel = context.WithTimeout(ctx, statusReadTimeout)
	}
	resp, err := s.cfg.Etcd.MemberList(lctx)
	cancel()
	if err != nil && fallback && ctx.Err() == nil {
		// Bounded too: a node cut off from every member must still answer.
		sctx, scancel := context.WithTimeout(ctx, statusReadTimeout)
		resp, err = s.cfg.Etcd.MemberList(sctx, clientv3.WithSerializable())
		scancel()
	}
	if err != nil {
		return nil, etcdError(ctx, "etcd member list", err)
	}
	return resp.Members, nil
}

// findMember finds a member by name, or else by hex id.
func findMember(members []*etcdserverpb.Member, nameOrID string) (*etcdserverpb.Member, error) {
	if nameOrID == "" {
		return nil, shoal.Invalid("name", "give a member's name or hex id (`shoal cluster member list` shows them)")
	}
	var found []*etcdserverpb.Member
	for _, m := range members {
		if m.Name == nameOrID {
			found = append(found, m)
		}
	}
	if len(found) > 1 {
		return nil, shoal.Invalid("name", "%d etcd members are named %q; give the hex id instead", len(found), nameOrID)
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if id, err := strconv.ParseUint(nameOrID, 16, 64); err == nil {
		for _, m := range members {
			if m.ID == id {
				return m, nil
			}
		}
	}
	return nil, shoal.NotFound("no etcd member is named %q or has that id; `shoal cluster member list` shows them", nameOrID)
}

func memberProto(m *etcdserverpb.Member) *shoalv1.Member {
	return &shoalv1.Member{
		Name:       m.Name,
		Id:         fmt.Sprintf("%x", m.ID),
		PeerUrls:   m.PeerURLs,
		ClientUrls: m.ClientURLs,
		Learner:    m.IsLearner,
	}
}

// memberName is a member's name, or its hex id while it has none (added,
// not started yet).
func memberName(m *etcdserverpb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x", m.ID)
}

func sameURLs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// etcdError gives an etcd error the kind its gRPC code says: etcd's
// refusals (say, too many learners) are failed preconditions, the rest
// are worth a retry.
func etcdError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ee rpctypes.EtcdError
	if errors.As(rpctypes.Error(err), &ee) {
		switch ee.Code() {
		case codes.FailedPrecondition:
			return shoal.FailedPrecondition("%s: %s", what, ee.Error())
		case codes.InvalidArgument, codes.OutOfRange:
			return shoal.Invalid("", "%s: %s", what, ee.Error())
		case codes.NotFound:
			return shoal.NotFound("%s: %s", what, ee.Error())
		case codes.AlreadyExists:
			return shoal.AlreadyExists("%s: %s", what, ee.Error())
		}
	}
	return shoal.Unavailable("%s: etcd: %v", what, err)
}
