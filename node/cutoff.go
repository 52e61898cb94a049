package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"shoal"
	"shoal/agent"
	"shoal/docker"
	"shoal/embedetcd"
	"shoal/internal/backoff"
	"shoal/store"
)

// A node restarted while cut off from etcd.
//
// A node learns its cluster id from etcd, and its agent (the fence of a
// running node, agent/freeze.go) starts only once it has registered. A
// node process restarted while etcd is out of its reach would do neither,
// while the containers of its earlier run go on unobserved and the cluster
// completes deletions of its sandboxes after the fence margin. So the
// cluster id is kept in the data dir (clusterIDFile), and a node that has
// run before (it has the file):
//
//   - keeps trying etcd (its dial, the cluster id) instead of failing its
//     start, as long as etcd is only unreachable;
//   - freezes its containers once its --node-ttl has passed since it
//     started without registering (guardUnregistered), as a running node
//     that cannot renew its lease does.
//
// When etcd answers it starts as usual, and its agent thaws what was
// frozen (or removes the containers of sandboxes deleted meanwhile).

// clusterIDFile, in the data dir, holds the id of the cluster the node
// last ran in.
const clusterIDFile = "cluster-id"

// knownCluster is the cluster id the data dir holds, or "".
func (n *Node) knownCluster() string {
	b, _ := os.ReadFile(filepath.Join(n.cfg.DataDir, clusterIDFile))
	return strings.TrimSpace(string(b))
}

// retryEtcd is how long a node that ran before waits between tries of an
// etcd it cannot reach.
const retryEtcd = time.Second

// untilReachable runs try until it succeeds, fails otherwise than by etcd
// being unreachable, or ctx ends; a node that never ran tries once.
func (n *Node) untilReachable(ctx context.Context, what string, try func() error) error {
	if n.knownCluster() == "" {
		return try()
	}
	var last error
	err := backoff.Retry(ctx, retryEtcdPolicy, func(attempt int) error {
		last = try()
		if last == nil || ctx.Err() != nil || !unreachable(last) {
			return backoff.Permanent(last)
		}
		if attempt == 1 {
			n.log.Warn("etcd does not answer; this node ran before, so it keeps trying (its containers are frozen if it has not registered within --node-ttl of its start)",
				"step", what, "err", last)
		}
		return last
	})
	if err != nil {
		return last // try's own error, also when ctx ended between tries
	}
	return nil
}

// retryEtcdPolicy waits retryEtcd between tries, without end.
var retryEtcdPolicy = backoff.Policy{Initial: retryEtcd, Max: retryEtcd}

func unreachable(err error) bool {
	return shoal.KindOf(err) == shoal.KindUnavailable || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, embedetcd.ErrUnreachable)
}

// clusterID reads the cluster id from etcd and keeps it in the data dir.
func (n *Node) clusterID(ctx context.Context, st *store.Store) (string, error) {
	known := n.knownCluster()
	var id string
	err := n.untilReachable(ctx, "cluster id", func() error {
		cctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
		defer cancel()
		var err error
		id, err = st.ClusterID(cctx)
		return err
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("read the cluster id from etcd: %w", err)
	case id == known:
		return id, nil
	case known != "":
		// Another cluster's data dir (the default one, reused with a new
		// etcd): nothing of it binds this one. Its frozen set names the
		// other cluster's containers, which this node never lists.
		n.log.Warn("the data dir was last used in another cluster; it is this cluster's now", "data_dir", n.cfg.DataDir, "was", known, "now", id)
	}
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.cfg.DataDir, clusterIDFile), []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	return id, nil
}

// guardUnregistered freezes the containers of a node that ran before and
// has not registered within --node-ttl of started; the returned stop,
// called once the node has registered (or gives up), ends the guard and
// waits for it.
func (n *Node) guardUnregistered(ctx context.Context, started time.Time) (stop func()) {
	cluster := n.knownCluster()
	if cluster == "" || n.cfg.Runtime == RuntimeHollow {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(started.Add(n.cfg.NodeTTL))):
		}
		for !n.freezeUnregistered(ctx, cluster) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// freezeUnregistered pauses the node's containers of cluster; false if
// that failed (it is tried again).
func (n *Node) freezeUnregistered(ctx context.Context, cluster string) bool {
	cfg := n.cfg
	rt, err := docker.New(ctx, docker.Config{Host: cfg.DockerHost, Node: cfg.ID, Cluster: cluster, Network: cfg.SandboxNetwork, Logger: cfg.Logger})
	if err != nil {
		n.log.Warn("freeze while unregistered: the engine does not answer; trying again", "err", err)
		return false
	}
	defer rt.Close()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	count, err := agent.FreezeUnregistered(fctx, cfg.ID, rt, filepath.Join(cfg.DataDir, frozenFile), cfg.Logger)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("freeze while unregistered: some containers could not be paused; trying again", "err", err)
		}
		return false
	}
	n.log.Warn("not registered within --node-ttl of the start (etcd unreachable): froze this node's containers until it joins", "frozen", count)
	return true
}
