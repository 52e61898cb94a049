package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/embedetcd"
	"shoal/etcdmember"
	"shoal/pki"
)

// The embedded member's place in an etcd cluster. A node's member is
// alone by default; --etcd-initial-cluster bootstraps several at once;
// --join adds one to a running cluster through any node's API. Whatever
// the flags, a data dir that holds a member already restarts it as itself
// (etcd ignores the initial-cluster settings then), so a node restarts
// with the flags it was started with.

// JoinTimeout bounds the join: the learner catching up and etcd accepting
// its promotion.
const JoinTimeout = 2 * time.Minute

// EtcdDir is where a node keeps its embedded member's data.
func EtcdDir(dataDir string) string { return filepath.Join(dataDir, "etcd") }

// etcdConfig is the embedded member's config.
func (c *Config) etcdConfig() embedetcd.Config {
	ec := embedetcd.DefaultConfig(EtcdDir(c.DataDir))
	ec.Name = c.ID
	ec.ListenClient, ec.ListenPeer = c.EtcdListenClient, c.EtcdListenPeer
	ec.AdvertiseClient, ec.AdvertisePeer = c.EtcdAdvertiseClient, c.EtcdAdvertisePeer
	ec.InitialCluster, ec.InitialClusterState = c.EtcdInitialCluster, c.EtcdInitialClusterState
	if c.Join != "" {
		ec.InitialClusterState = embedetcd.ClusterExisting
	}
	ec.UnsafeNoFsync = c.UnsafeNoFsync
	ec.TLS = c.TLS
	return ec
}

// validateMembership refuses flags that contradict each other; the URLs
// themselves are checked with the embedded member's config.
func (c *Config) validateMembership() error {
	if c.Join != "" {
		if c.EtcdInitialCluster != "" {
			return errors.New("--join: cannot be combined with --etcd-initial-cluster: a joining member gets the cluster's list from the node it joins")
		}
		if len(c.EtcdEndpoints) > 0 {
			return errors.New("--join: cannot be combined with --etcd-endpoints: --join adds an embedded etcd member, a node with --etcd-endpoints runs none")
		}
		if c.EtcdInitialClusterState == embedetcd.ClusterNew {
			return errors.New("--etcd-initial-cluster-state: a --join member starts as existing; leave the flag out")
		}
		if _, _, err := net.SplitHostPort(c.Join); err != nil {
			return fmt.Errorf("--join: %q is not host:port (the API address of a running node): %v", c.Join, err)
		}
	}
	if len(c.EtcdEndpoints) > 0 {
		for flag, v := range map[string]string{
			"etcd-initial-cluster": c.EtcdInitialCluster, "etcd-initial-cluster-state": c.EtcdInitialClusterState,
			"etcd-advertise-client": c.EtcdAdvertiseClient, "etcd-advertise-peer": c.EtcdAdvertisePeer,
		} {
			if v != "" {
				return fmt.Errorf("--%s: not with --etcd-endpoints, which runs no embedded etcd member", flag)
			}
		}
		for _, u := range c.EtcdEndpoints {
			// etcd's clients take host:port and unix sockets as well.
			if _, _, err := net.SplitHostPort(u); (err == nil && !strings.Contains(u, "/")) || strings.HasPrefix(u, "unix://") || strings.HasPrefix(u, "unixs://") {
				continue
			}
			if err := etcdmember.CheckURL("etcd-endpoints", u); err != nil {
				return fmt.Errorf("--%w", err)
			}
		}
	}
	return nil
}

// startMember starts the embedded member, joining the cluster at --join
// first when the data dir holds no member yet, and returns a client of the
// cluster's voters. A --join member that is still a learner (the join, or
// a restart after a failed promotion) is promoted before startMember
// returns.
func (n *Node) startMember(ctx context.Context) (*embedetcd.Server, *clientv3.Client, error) {
	cfg := n.cfg
	ec := cfg.etcdConfig()
	var join shoalv1.ClusterClient
	if cfg.Join != "" {
		conn, err := grpc.NewClient(cfg.Join, grpc.WithTransportCredentials(n.transport.DialCreds()))
		if err != nil {
			return nil, nil, fmt.Errorf("--join %s: %w", cfg.Join, err)
		}
		defer conn.Close()
		join = shoalv1.NewClusterClient(conn)
		if !embedetcd.Initialized(ec.DataDir) {
			ic, err := n.addSelf(ctx, join, ec)
			if err != nil {
				return nil, nil, err
			}
			ec.InitialCluster = ic
		}
	}
	srv, err := startJoining(ctx, ec, join != nil)
	if errors.Is(err, embedetcd.ErrRemoved) {
		return nil, nil, n.memberErr(err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w (%s)", err, memberStartHint(cfg, err))
	}
	eps := srv.VoterClientURLs()
	if len(eps) == 0 {
		eps = []string{srv.OwnURL()}
	}
	cli, err := embedetcd.DialMembers(eps, embedetcd.WithTLS(n.transport.ClientTLS()))
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	if join != nil && srv.IsLearner() {
		if err := n.promoteSelf(ctx, join, srv, cli); err != nil {
			cli.Close()
			srv.Close()
			return nil, nil, err
		}
	}
	return srv, cli, nil
}

// addSelf asks the node at --join to add this node's member as a learner
// and returns the initial cluster to start it with. AddMember is
// idempotent for the same name and peer URL, so a node that died before
// its member first started asks again on restart.
func (n *Node) addSelf(ctx context.Context, join shoalv1.ClusterClient, ec embedetcd.Config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, JoinTimeout)
	defer cancel()
	peer := ec.AdvertisePeer
	if peer == "" {
		peer = ec.ListenPeer
	}
	var resp *shoalv1.AddMemberResponse
	err := n.retryUnavailable(ctx, func(ctx context.Context) (err error) {
		resp, err = join.AddMember(ctx, &shoalv1.AddMemberRequest{Name: n.cfg.ID, PeerUrls: []string{peer}})
		return err
	})
	if ce := (*pki.CertError)(nil); errors.As(err, &ce) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("--join %s: add this node's etcd member: %s", n.cfg.Join, status.Convert(err).Message())
	}
	n.log.Info("etcd member added as a learner", "via", n.cfg.Join, "id", resp.GetMember().GetId(), "initial_cluster", resp.GetInitialCluster())
	return resp.GetInitialCluster(), nil
}

// promoteSelf waits until the learner has applied what the cluster had
// committed when it started, then asks the node at --join to promote it,
// within JoinTimeout.
func (n *Node) promoteSelf(ctx context.Context, join shoalv1.ClusterClient, srv *embedetcd.Server, cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(ctx, JoinTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		return fmt.Errorf("--join %s: %s: %s; the member stays a learner: restart the node to try again, or run `shoal cluster member promote %s`",
			n.cfg.Join, what, status.Convert(err).Message(), n.cfg.ID)
	}
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		return fail("read the cluster's raft index", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for srv.AppliedIndex() < st.RaftIndex {
		select {
		case <-ctx.Done():
			return fail(fmt.Sprintf("catch up to raft index %d (at %d)", st.RaftIndex, srv.AppliedIndex()), ctx.Err())
		case <-tick.C:
		}
	}
	// etcd may still find it behind; the node at --join retries for a
	// while, and so do we while it says UNAVAILABLE.
	err = n.retryUnavailable(ctx, func(ctx context.Context) error {
		_, err := join.PromoteMember(ctx, &shoalv1.PromoteMemberRequest{Name: n.cfg.ID})
		return err
	})
	if ce := (*pki.CertError)(nil); errors.As(err, &ce) {
		return err
	}
	if err != nil {
		return fail("promote this node's etcd member", err)
	}
	n.log.Info("etcd member promoted to voter", "id", fmt.Sprintf("%x", srv.ID()))
	// The member serves clients now: use it too.
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := cli.Sync(sctx); err != nil {
		n.log.Warn("etcd endpoints not refreshed after the promotion; the periodic sync will", "err", err)
	}
	return nil
}

// retryUnavailable calls op until it returns anything but UNAVAILABLE
// (the node at --join restarting, or etcd refusing for now) or ctx ends,
// backing off up to 2s. It returns op's last error, or, when the node at
// --join and this one refuse each other's certificates (which gRPC reports
// as UNAVAILABLE too), at once the error of checkPeers.
func (n *Node) retryUnavailable(ctx context.Context, op func(context.Context) error) error {
	delay := 200 * time.Millisecond
	for {
		err := op(ctx)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		if perr := n.checkPeers(ctx, "--join", []string{n.cfg.Join}); perr != nil {
			return perr
		}
		n.log.Info("--join: not yet; retrying", "err", status.Convert(err).Message(), "in", delay)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// memberErr says what to do about a member removed from its cluster.
func (n *Node) memberErr(err error) error {
	if errors.Is(err, embedetcd.ErrRemoved) {
		return fmt.Errorf("%w: the member in %s cannot start again; remove that directory and start the node with --join ADDRESS to join as a new member",
			err, EtcdDir(n.cfg.DataDir))
	}
	return err
}

// startJoining starts the member. A member that joins (its data dir new)
// learns the cluster from a peer on its first start; a peer that has not
// yet applied the membership change that added it answers with one member
// fewer, and etcd refuses to start ("member count is unequal"). That peer
// catches up within moments: the start is tried again, for up to
// JoinTimeout.
func startJoining(ctx context.Context, ec embedetcd.Config, joining bool) (*embedetcd.Server, error) {
	deadline := time.Now().Add(JoinTimeout)
	for {
		fresh := !embedetcd.Initialized(ec.DataDir)
		srv, err := embedetcd.Start(ec)
		if err == nil || !joining || !fresh || !strings.Contains(err.Error(), "member count is unequal") || time.Now().After(deadline) {
			return srv, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond): // let the peer apply the change
		}
	}
}

// listenAddr is the address of etcd's "listen tcp ADDR: bind: address
// already in use".
var listenAddr = regexp.MustCompile(`listen tcp (\S+): bind: address already in use`)

// memberStartHint says what to check when the embedded member did not
// start: when a port was taken, the flag whose URL has that port (the
// client and the peer URL are told apart by their ports); otherwise the
// data dir, which a member locks.
func memberStartHint(cfg Config, err error) string {
	m := listenAddr.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Sprintf("is another node using %s?", cfg.DataDir)
	}
	_, port, _ := net.SplitHostPort(m[1])
	var flags []string
	for _, l := range []struct{ flag, url string }{{"--etcd-listen-peer", cfg.EtcdListenPeer}, {"--etcd-listen-client", cfg.EtcdListenClient}} {
		if u, perr := url.Parse(l.url); perr == nil && u.Port() == port {
			flags = append(flags, l.flag+" "+l.url)
		}
	}
	switch len(flags) {
	case 1:
		return fmt.Sprintf("port %s of %s is taken: is another node or etcd running on this host?", port, flags[0])
	case 2:
		return fmt.Sprintf("%s and %s share port %s: give them different ports", flags[0], flags[1], port)
	}
	return fmt.Sprintf("port %s is taken: is another node or etcd running on this host?", port)
}
