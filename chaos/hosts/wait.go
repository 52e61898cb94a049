package hosts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	shoalv1 "shoal/api/shoal/v1"
)

// pollInterval is how often the waits look again.
const pollInterval = 100 * time.Millisecond

// WaitServing waits until node i's API serves a read (a list, which needs
// etcd), and fails at once if its container is not running (with the end
// of its log), or when ctx ends.
func (c *Cluster) WaitServing(ctx context.Context, i int) error {
	n := c.node(i)
	var lastErr error
	for {
		info, err := c.sys.ContainerInspect(ctx, n.cid())
		if err != nil {
			return fmt.Errorf("hosts: node %d (%s): inspect its container: %w", i, n.id, err)
		}
		if !info.State.Running {
			return fmt.Errorf("hosts: node %d (%s) is not running (%s, exit code %d); its log ends:\n%s",
				i, n.id, info.State.Status, info.State.ExitCode, c.logTail(context.WithoutCancel(ctx), n, 30))
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, lastErr = shoalv1.NewShoalClient(n.conn).ListSandboxes(lctx, &shoalv1.ListSandboxesRequest{PageSize: 1})
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hosts: node %d (%s) at %s did not serve: %w (last: %v); its log ends:\n%s",
				i, n.id, n.apiAddr(), ctx.Err(), lastErr, c.logTail(context.WithoutCancel(ctx), n, 30))
		case <-time.After(pollInterval):
		}
	}
}

// WaitAllHealthy waits until the cluster is whole: every node not removed
// runs (not stopped, not disconnected) and is Ready in shoal's registry,
// and the etcd members are exactly the voters not removed, none a
// learner, each answering with the same raft leader. When ctx ends it
// returns what was still missing.
func (c *Cluster) WaitAllHealthy(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("hosts: etcd client: %w", err)
	}
	defer cli.Close()
	for {
		err := c.healthy(ctx, cli)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hosts: the cluster is not healthy: %w (%v)", err, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// healthy says what keeps the cluster from being whole, or nil.
func (c *Cluster) healthy(ctx context.Context, cli *clientv3.Client) error {
	c.mu.Lock()
	var live []*node
	for _, n := range c.nodes {
		if !n.isRemoved() {
			live = append(live, n)
		}
	}
	c.mu.Unlock()
	var voters []string
	for _, n := range live {
		if n.isDisconnected() {
			return fmt.Errorf("node %d (%s) is disconnected", n.index, n.id)
		}
		info, err := c.sys.ContainerInspect(ctx, n.cid())
		if err != nil {
			return fmt.Errorf("node %d (%s): inspect: %w", n.index, n.id, err)
		}
		if !info.State.Running || info.State.Paused {
			return fmt.Errorf("node %d (%s) is %s", n.index, n.id, info.State.Status)
		}
		if n.voter {
			voters = append(voters, n.id)
		}
	}

	// shoal's registry, through the first node that answers.
	var nodes *shoalv1.ListNodesResponse
	var errs []error
	for _, n := range live {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := shoalv1.NewClusterClient(n.conn).ListNodes(lctx, &shoalv1.ListNodesRequest{})
		cancel()
		if err == nil {
			nodes = r
			break
		}
		errs = append(errs, fmt.Errorf("node %d (%s): %w", n.index, n.id, err))
	}
	if nodes == nil {
		return fmt.Errorf("no node lists the nodes: %w", errors.Join(errs...))
	}
	ready := map[string]bool{}
	for _, it := range nodes.Items {
		ready[it.Name] = it.GetStatus().GetReady()
	}
	for _, n := range live {
		if !ready[n.id] {
			return fmt.Errorf("node %d (%s) is not Ready in the registry", n.index, n.id)
		}
	}

	// etcd: the members are the voters, all voting, all healthy.
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ml, err := cli.MemberList(mctx)
	if err != nil {
		return fmt.Errorf("etcd member list: %w", err)
	}
	var names []string
	for _, m := range ml.Members {
		if m.IsLearner {
			return fmt.Errorf("etcd member %s (%x) is a learner", m.Name, m.ID)
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	slices.Sort(voters)
	if !slices.Equal(names, voters) {
		return fmt.Errorf("etcd members [%s], want the voters [%s]", strings.Join(names, " "), strings.Join(voters, " "))
	}
	var leader uint64
	for _, m := range ml.Members {
		if len(m.ClientURLs) == 0 {
			return fmt.Errorf("etcd member %s has no client URL (not started?)", m.Name)
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURLs[0])
		cancel()
		if err != nil {
			return fmt.Errorf("etcd member %s: status: %w", m.Name, err)
		}
		if len(st.Errors) > 0 {
			return fmt.Errorf("etcd member %s: %s", m.Name, strings.Join(st.Errors, "; "))
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return fmt.Errorf("etcd member %s sees leader %x, others %x", m.Name, st.Leader, leader)
		}
		leader = st.Leader
	}
	return nil
}
