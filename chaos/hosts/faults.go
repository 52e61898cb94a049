package hosts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/internal/backoff"
	"shoal/internal/engine"
)

// Every fault is one Docker call on the node's container (or a setting of
// the peer proxies), safe while traffic runs, and has an undo that leaves
// the node as it was: same container, data, address and engine.

// live is node i held for a fault (n.fault), or ErrRemoved. Call the
// returned unlock when done.
func (c *Cluster) live(i int) (*node, func(), error) {
	n := c.node(i)
	n.fault.Lock()
	if n.isRemoved() {
		n.fault.Unlock()
		return nil, nil, fmt.Errorf("hosts: node %d (%s): %w", i, n.id, ErrRemoved)
	}
	return n, n.fault.Unlock, nil
}

func (n *node) setDisconnected(v bool) {
	n.state.Lock()
	defer n.state.Unlock()
	n.disconnected = v
}

// Kill sends SIGKILL to node i's process (docker kill), also when it is
// stopped, and waits until its container has exited. Its sandboxes run on
// (their containers are its engine's, not its own). Start undoes it.
func (c *Cluster) Kill(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	return c.kill(ctx, n)
}

func (c *Cluster) kill(ctx context.Context, n *node) error {
	if err := c.sys.ContainerKill(ctx, n.cid(), "KILL"); err != nil {
		return fmt.Errorf("hosts: kill node %d (%s): %w", n.index, n.id, err)
	}
	wait, errc := c.sys.ContainerWait(ctx, n.cid(), container.WaitConditionNotRunning)
	select {
	case <-wait:
		return nil
	case err := <-errc:
		return fmt.Errorf("hosts: kill node %d (%s): wait for its exit: %w", n.index, n.id, err)
	}
}

// Start starts node i's container again after Kill: same container, id,
// flags, address, data and engine. It returns once the container runs;
// WaitServing waits for its API. A node killed while disconnected starts
// disconnected.
func (c *Cluster) Start(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.startContainer(ctx, n); err != nil {
		return err
	}
	n.conn.ResetConnectBackoff()
	return nil
}

// retryPolicy spaces the harness's tries of an engine or cluster call
// the other side may refuse or not answer for a while; the caller's
// context bounds them.
var retryPolicy = backoff.Policy{Initial: 200 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// startAttempt bounds one start call: the engine (Docker 20.10) has been
// seen to hang a start of a just-killed container for minutes (a lock in
// the daemon, moby#28364 and kin) and answer the next call at once.
const startAttempt = 30 * time.Second

// startContainer starts n's container, retrying a call the engine does not
// answer within startAttempt until ctx ends; a container found running
// (an earlier attempt went through after all) is started.
func (c *Cluster) startContainer(ctx context.Context, n *node) error {
	err := backoff.Retry(ctx, retryPolicy, func(attempt int) error {
		actx, cancel := context.WithTimeout(ctx, startAttempt)
		err := c.sys.ContainerStart(actx, n.cid(), container.StartOptions{})
		cancel()
		if err == nil {
			return nil
		}
		if in, ierr := c.sys.ContainerInspect(ctx, n.cid()); ierr == nil && in.State != nil && in.State.Running {
			return nil
		}
		if ctx.Err() != nil || actx.Err() == nil {
			// The caller's time is up, or the engine answered: an error
			// it gave is not a hang.
			return backoff.Permanent(err)
		}
		c.cfg.Logf("hosts: start node %d (%s): no answer from the engine within %s (attempt %d); trying again", n.index, n.id, startAttempt, attempt)
		return err
	})
	if err != nil {
		return fmt.Errorf("hosts: start node %d (%s): %w", n.index, n.id, err)
	}
	return nil
}

// Stop freezes node i's process (docker pause: the cgroup freezer, as
// SIGSTOP): its connections stay open but it answers nothing and renews
// no lease, as a hung host does. Its sandboxes, on its engine, run on.
// Resume undoes it.
func (c *Cluster) Stop(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.sys.ContainerPause(ctx, n.cid()); err != nil {
		return fmt.Errorf("hosts: stop (pause) node %d (%s): %w", i, n.id, err)
	}
	return nil
}

// Resume thaws a node frozen by Stop (docker unpause).
func (c *Cluster) Resume(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.sys.ContainerUnpause(ctx, n.cid()); err != nil {
		return fmt.Errorf("hosts: resume (unpause) node %d (%s): %w", i, n.id, err)
	}
	return nil
}

// Disconnect cuts node i off the network (docker network disconnect): its
// container is left with loopback only, so it reaches no other node, no
// etcd member (its own excepted) and no client, and nobody reaches it. Its
// process runs on and still reaches its engine (a unix socket), so it can
// freeze its sandboxes. Reconnect undoes it.
func (c *Cluster) Disconnect(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if n.isDisconnected() {
		return fmt.Errorf("hosts: disconnect node %d (%s): it is disconnected already", i, n.id)
	}
	if err := c.sys.NetworkDisconnect(ctx, c.net.id, n.cid(), false); err != nil {
		return fmt.Errorf("hosts: disconnect node %d (%s) from %s: %w", i, n.id, c.net.name, err)
	}
	n.setDisconnected(true)
	return nil
}

// Reconnect puts node i back on the network at the address it had.
func (c *Cluster) Reconnect(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if !n.isDisconnected() {
		return fmt.Errorf("hosts: reconnect node %d (%s): it is not disconnected", i, n.id)
	}
	if err := c.sys.NetworkConnect(ctx, c.net.id, n.cid(), &network.EndpointSettings{
		IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: n.addr.String()},
	}); err != nil {
		return fmt.Errorf("hosts: reconnect node %d (%s) to %s at %s: %w", i, n.id, c.net.name, n.addr, err)
	}
	n.setDisconnected(false)
	n.conn.ResetConnectBackoff()
	return nil
}

// Restore brings node i back from whatever a fault that failed half-way
// left: it thaws the node if it is frozen, starts it if it is not running
// and puts it back on the network if it is off it, each judged from what
// its engine says, not from what the fault meant to do (a pause that
// failed "unable to freeze" may have frozen it all the same). It does
// nothing to a node that runs, thawed and connected; it returns once the
// container runs, and WaitServing waits for its API. SlowPeer latency is
// Unslow's to remove.
func (c *Cluster) Restore(ctx context.Context, i int) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	info, err := c.sys.ContainerInspect(ctx, n.cid())
	if err != nil {
		return fmt.Errorf("hosts: restore node %d (%s): inspect: %w", i, n.id, err)
	}
	if info.State != nil && info.State.Paused {
		if err := c.sys.ContainerUnpause(ctx, n.cid()); err != nil {
			return fmt.Errorf("hosts: restore node %d (%s): unpause: %w", i, n.id, err)
		}
	}
	if info.State == nil || !info.State.Running {
		if err := c.startContainer(ctx, n); err != nil {
			return fmt.Errorf("hosts: restore node %d (%s): %w", i, n.id, err)
		}
		n.conn.ResetConnectBackoff()
	}
	on := false
	if info.NetworkSettings != nil {
		for name, ep := range info.NetworkSettings.Networks {
			if name == c.net.name || (ep != nil && ep.NetworkID == c.net.id) {
				on = true
			}
		}
	}
	if !on {
		if err := c.sys.NetworkConnect(ctx, c.net.id, n.cid(), &network.EndpointSettings{
			IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: n.addr.String()},
		}); err != nil {
			return fmt.Errorf("hosts: restore node %d (%s): reconnect to %s at %s: %w", i, n.id, c.net.name, n.addr, err)
		}
		n.conn.ResetConnectBackoff()
	}
	n.setDisconnected(false)
	return nil
}

// SlowPeer adds d of latency, each way, to every byte of voter i's etcd
// peer traffic: the connections other members dial to it (its peer proxy)
// and the ones it dials to them (their proxies, for connections from its
// address). Client traffic and other voters' links are untouched; two
// slowed voters' link gets both delays. It holds across Kill/Start and
// Disconnect/Reconnect until Unslow. The kernel's netem would need
// sch_netem, which this machine's kernel lacks; the proxies need nothing.
func (c *Cluster) SlowPeer(i int, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("hosts: SlowPeer(%d, %s): want a positive delay (Unslow removes it)", i, d)
	}
	return c.setSlow(i, d)
}

// Unslow removes SlowPeer's latency from voter i.
func (c *Cluster) Unslow(i int) error { return c.setSlow(i, 0) }

func (c *Cluster) setSlow(i int, d time.Duration) error {
	n, unlock, err := c.live(i)
	if err != nil {
		return err
	}
	defer unlock()
	if !n.voter {
		return fmt.Errorf("hosts: slow peer %d (%s): it is a worker, with no etcd peer traffic", i, n.id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.slow[n.id] = d
	} else {
		delete(c.slow, n.id)
	}
	n.peer.SetLatency(d)
	for _, o := range c.nodes {
		if o.peer != nil && o != n {
			o.peer.SetSourceLatency(n.id, d)
		}
	}
	return nil
}

// ReplaceMember replaces voter i for good, as an operator replaces a dead
// host: it kills the node, removes its member through another voter's API
// (`shoal cluster member remove`), removes its host (its engine with its
// sandboxes' containers; its stopped container stays for Logs until
// Close), and starts a new voter with a new id, address, data dir and
// engine that joins through that voter's API (--join). It returns the new
// node's index once it serves. shoal still remembers node i as NotReady
// with its sandboxes UNKNOWN; forgetting it (`shoal node remove`) is the
// caller's to do.
func (c *Cluster) ReplaceMember(ctx context.Context, i int) (int, error) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	n, unlock, err := c.live(i)
	if err != nil {
		return -1, err
	}
	if !n.voter {
		unlock()
		return -1, fmt.Errorf("hosts: replace member %d (%s): it is a worker, with no member", i, n.id)
	}
	t0 := time.Now()
	info, err := c.sys.ContainerInspect(ctx, n.cid())
	if err != nil {
		unlock()
		return -1, fmt.Errorf("hosts: replace member %d (%s): inspect: %w", i, n.id, err)
	}
	if info.State.Running { // stopped (paused) included
		if err := c.kill(ctx, n); err != nil {
			unlock()
			return -1, err
		}
	}
	tKill := time.Now()
	via, err := c.removeMember(ctx, n)
	if err != nil {
		unlock()
		return -1, err
	}
	n.state.Lock()
	n.removed = true
	n.state.Unlock()
	unlock()
	c.mu.Lock()
	delete(c.slow, n.id)
	for _, o := range c.nodes {
		if o.peer != nil {
			o.peer.SetSourceLatency(n.id, 0)
		}
	}
	c.mu.Unlock()
	tRemove := time.Now()
	n.peer.Close()
	if n.engine.Shared {
		err = removeLabelled(ctx, c.sys, docker.LabelNode+"="+n.id)
	} else {
		err = n.engine.Close(ctx)
	}
	if err != nil {
		return -1, fmt.Errorf("hosts: replace member %d (%s): remove its host's engine: %w", i, n.id, err)
	}
	c.cfg.Logf("hosts: node %d (%s) removed for good through node %d in %s (kill %s, member removal %s, host %s)", i, n.id, via.index,
		time.Since(t0).Round(time.Millisecond), tKill.Sub(t0).Round(time.Millisecond), tRemove.Sub(tKill).Round(time.Millisecond), time.Since(tRemove).Round(time.Millisecond))

	c.mu.Lock()
	k := len(c.nodes)
	c.mu.Unlock()
	if k >= maxNodes {
		return -1, fmt.Errorf("hosts: replace member %d: no address left for node %d", i, k)
	}
	id := c.nodeID(k)
	var e *engine.Engine
	if c.shared != "" {
		e = c.sysEng
	} else {
		es, err := c.startPrivate(ctx, id)
		if err != nil {
			return -1, fmt.Errorf("hosts: replace member %d: the new node's engine: %w", i, err)
		}
		e = es[0]
	}
	nn, err := c.newNode(ctx, k, true, e, via.apiAddr())
	if err != nil {
		return -1, err // Close removes the engine
	}
	if err := c.createContainer(ctx, nn); err != nil {
		return -1, err
	}
	if err := c.sys.ContainerStart(ctx, nn.cid(), container.StartOptions{}); err != nil {
		return -1, fmt.Errorf("hosts: start node %d (%s): %w", k, nn.id, err)
	}
	if err := c.WaitServing(ctx, k); err != nil {
		return -1, err
	}
	c.cfg.Logf("hosts: node %d (%s) replaced by node %d (%s), joined through node %d, in %s", i, n.id, k, nn.id, via.index, time.Since(t0).Round(time.Millisecond))
	return k, nil
}

// removeMember removes n's member through the first other voter whose
// API takes the call. While etcd elects a leader (n may have led) the
// call fails UNAVAILABLE: it is tried again until ctx ends.
func (c *Cluster) removeMember(ctx context.Context, n *node) (*node, error) {
	var done *node
	err := backoff.Retry(ctx, retryPolicy, func(int) error {
		c.mu.Lock()
		var vias []*node
		for _, o := range c.nodes {
			if o.voter && o != n && !o.isRemoved() {
				vias = append(vias, o)
			}
		}
		c.mu.Unlock()
		if len(vias) == 0 {
			return backoff.Permanent(errors.New("no other voter"))
		}
		var lastErr error
		for _, via := range vias {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := shoalv1.NewClusterClient(via.conn).RemoveMember(cctx, &shoalv1.RemoveMemberRequest{Name: n.id})
			cancel()
			if err == nil || status.Code(err) == codes.NotFound { // NotFound: removed already (an earlier try that timed out)
				done = via
				return nil
			}
			lastErr = fmt.Errorf("through node %d (%s): %w", via.index, via.id, err)
		}
		return lastErr
	})
	if err != nil {
		return nil, fmt.Errorf("hosts: remove the member of node %d (%s): %w", n.index, n.id, err)
	}
	return done, nil
}
