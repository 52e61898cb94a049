package hosts

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	shoalv1 "shoal/api/shoal/v1"
)

// node is node i; an index out of range is a caller's bug and panics.
func (c *Cluster) node(i int) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		panic(fmt.Sprintf("hosts: no node %d in a cluster of %d", i, len(c.nodes)))
	}
	return c.nodes[i]
}

// Len is the number of nodes, the replaced ones included.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Run is the run's id: the node ids' prefix and the value of LabelRun.
func (c *Cluster) Run() string { return c.run }

// Gateway is this machine's address on the run's network: what a node
// reaches a server of this machine's at (one listening on every address,
// or on this one).
func (c *Cluster) Gateway() netip.Addr { return c.net.gateway }

// Dir is the run's directory on this machine.
func (c *Cluster) Dir() string { return c.dir }

// ID is node i's node id (sandbox spec.node and status.node, the
// shoal.dev/node label of its containers).
func (c *Cluster) ID(i int) string { return c.node(i).id }

// Addr is node i's API address (host:port), reachable from this machine
// while the node is connected to the network.
func (c *Cluster) Addr(i int) string { return c.node(i).apiAddr() }

// DebugAddr is node i's net/http/pprof address (host:port).
func (c *Cluster) DebugAddr(i int) string {
	return net.JoinHostPort(c.node(i).addr.String(), strconv.Itoa(DebugPort))
}

// Addrs are the API addresses of the nodes not removed, for a client
// that spreads its calls or fails over (--endpoint a,b,c).
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var as []string
	for _, n := range c.nodes {
		if !n.isRemoved() {
			as = append(as, n.apiAddr())
		}
	}
	return as
}

// Client is a Shoal API client of node i; it reconnects across restarts
// and reconnections.
func (c *Cluster) Client(i int) shoalv1.ShoalClient { return shoalv1.NewShoalClient(c.node(i).conn) }

// ClusterClient is a Cluster API client of node i.
func (c *Cluster) ClusterClient(i int) shoalv1.ClusterClient {
	return shoalv1.NewClusterClient(c.node(i).conn)
}

// Voter reports whether node i runs an etcd member.
func (c *Cluster) Voter(i int) bool { return c.node(i).voter }

// Removed reports whether ReplaceMember removed node i for good: its
// container is stopped (kept for Logs until Close), its member removed and
// its engine gone.
func (c *Cluster) Removed(i int) bool { return c.node(i).isRemoved() }

// Disconnected reports whether node i is cut off by Disconnect.
func (c *Cluster) Disconnected(i int) bool { return c.node(i).isDisconnected() }

// EtcdEndpoints are the client URLs of the voters not removed, reachable
// from this machine (straight to the members, past every fault but
// Disconnect).
func (c *Cluster) EtcdEndpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var us []string
	for _, n := range c.nodes {
		if n.voter && !n.isRemoved() {
			us = append(us, clientURL(n))
		}
	}
	return us
}

// ClientURL is voter i's etcd client URL, and PeerURL the peer URL its
// member advertises (a proxy on this machine's address on the network,
// in front of the member's peer port). Both are "" for a worker.
func (c *Cluster) ClientURL(i int) string {
	if n := c.node(i); n.voter {
		return clientURL(n)
	}
	return ""
}

func (c *Cluster) PeerURL(i int) string {
	if n := c.node(i); n.voter {
		return peerURL(n)
	}
	return ""
}

// Engine is a Docker client of node i's engine, to see its containers
// directly rather than through shoal; with shared engines every node's is
// the system engine's. It is nil once the node is removed (its engine is
// gone with it).
func (c *Cluster) Engine(i int) *client.Client {
	n := c.node(i)
	if n.isRemoved() && !n.engine.Shared {
		return nil
	}
	return n.engine.Client
}

// SeparateEngines reports whether every node has a private engine. When
// false they share the system engine (SharedReason says why): a container
// on "another node's engine" is then on this one too.
func (c *Cluster) SeparateEngines() bool { return c.shared == "" }

// SharedReason is why the nodes share the system engine, or "".
func (c *Cluster) SharedReason() string { return c.shared }

// ContainerID is node i's container on the system engine.
func (c *Cluster) ContainerID(i int) string { return c.node(i).cid() }

// PID is the host pid of node i's shoal process (0 while not running).
func (c *Cluster) PID(ctx context.Context, i int) (int, error) {
	n := c.node(i)
	info, err := c.sys.ContainerInspect(ctx, n.cid())
	if err != nil {
		return 0, fmt.Errorf("hosts: inspect node %d (%s): %w", i, n.id, err)
	}
	return info.State.Pid, nil
}

// Logs is node i's log (stdout and stderr of every start of its
// container, JSON lines), as Docker keeps it.
func (c *Cluster) Logs(ctx context.Context, i int) ([]byte, error) {
	return c.logs(ctx, c.node(i))
}

func (c *Cluster) logs(ctx context.Context, n *node) ([]byte, error) {
	rc, err := c.sys.ContainerLogs(ctx, n.cid(), container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, fmt.Errorf("hosts: logs of node %d (%s): %w", n.index, n.id, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && err != io.EOF {
		return buf.Bytes(), fmt.Errorf("hosts: logs of node %d (%s): %w", n.index, n.id, err)
	}
	return buf.Bytes(), nil
}

// logTail is the last lines of node n's log, for errors.
func (c *Cluster) logTail(ctx context.Context, n *node, lines int) string {
	b, err := c.logs(ctx, n)
	if err != nil {
		return err.Error()
	}
	ls := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return string(bytes.Join(ls, []byte("\n")))
}
