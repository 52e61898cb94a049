package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"google.golang.org/grpc"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/docker"
	"shoal/node"
)

// RequireDocker skips the test when no Docker engine (or no sandbox image)
// is available, and fails it instead when SHOAL_REQUIRE_DOCKER=1.
func RequireDocker(t testing.TB) *client.Client {
	t.Helper()
	fail := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		if os.Getenv("SHOAL_REQUIRE_DOCKER") == "1" {
			t.Fatalf("SHOAL_REQUIRE_DOCKER=1 but %s", msg)
		}
		t.Skipf("skipping: %s (set SHOAL_REQUIRE_DOCKER=1 to make this a failure)", msg)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fail("no Docker client: %v", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		fail("no Docker engine is reachable: %v", err)
		return nil
	}
	if _, err := cli.ImageInspect(ctx, docker.DefaultImage); err != nil {
		cli.Close()
		fail("the sandbox image %s is missing (run `make image`): %v", docker.DefaultImage, err)
		return nil
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Node is a running test node.
type Node struct {
	*node.Node
	Config node.Config
	Client shoalv1.ShoalClient
	stop   func()
}

// Stop shuts the node down and waits for it.
func (n *Node) Stop() { n.stop() }

// NodeConfig is a config for a test node: its own data dir, free ports,
// fast resync and a unique node id whose containers are removed when the
// test ends.
func NodeConfig(t testing.TB) node.Config {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.ID = "t" + strings.ToLower(fmt.Sprintf("%x", time.Now().UnixNano()))[6:]
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	ec := EtcdConfig(t, cfg.DataDir)
	cfg.EtcdListenClient, cfg.EtcdListenPeer = ec.ListenClient, ec.ListenPeer
	cfg.Listen = "127.0.0.1:0"
	cfg.LeaseTTL = 2 * time.Second
	cfg.Resync = 300 * time.Millisecond
	cfg.OrphanGrace = time.Second
	cfg.UnsafeNoFsync = true
	return cfg
}

// StartNode starts a node with cfg and waits until it serves. It is stopped,
// and its containers removed, when the test ends.
func StartNode(t testing.TB, cfg node.Config) *Node {
	t.Helper()
	return StartNodes(t, cfg)[0]
}

// StartNodes starts nodes at once (the voters of a new etcd cluster wait
// for each other, so one by one would not do) and waits until every one
// serves. They are stopped, and their containers removed, when the test
// ends.
func StartNodes(t testing.TB, cfgs ...node.Config) []*Node {
	t.Helper()
	out := make([]*Node, len(cfgs))
	dones := make([]chan error, len(cfgs))
	for i, cfg := range cfgs {
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		dones[i] = done
		var stopped bool
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("node %s run: %v", cfg.ID, err)
				}
			case <-time.After(60 * time.Second):
				buf := make([]byte, 4<<20)
				t.Errorf("node %s did not stop within 60s; goroutines:\n%s", cfg.ID, buf[:runtime.Stack(buf, true)])
			}
		}
		// Cleanups run last-in first-out: stop the node first, then
		// remove whatever containers it left, so none can appear after
		// the sweep.
		t.Cleanup(func() { RemoveNodeContainers(t, cfg.ID) })
		t.Cleanup(stop)
		out[i] = &Node{Node: n, Config: cfg, stop: stop}
	}
	deadline := time.After(90 * time.Second)
	for i, n := range out {
		select {
		case <-n.Ready():
		case err := <-dones[i]:
			dones[i] <- err // for stop
			t.Fatalf("node %s did not start: %v", n.Config.ID, err)
		case <-deadline:
			t.Fatalf("node %s did not serve within 90s", n.Config.ID)
		}
		// A TLS node is dialed with its own certificate (role node).
		tr, err := n.Config.TLS.Transport()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		n.Client = shoalv1.NewShoalClient(conn)
	}
	return out
}

// RemoveNodeContainers removes every container labelled with a node id.
func RemoveNodeContainers(t testing.TB, nodeID string) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	ctx := context.Background()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"="+nodeID))})
	if err != nil {
		t.Logf("cleanup: list containers: %v", err)
		return
	}
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Logf("cleanup: remove %s: %v", c.ID[:12], err)
		}
	}
	// And the images committed for its sandboxes (docker/refresh.go).
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"="+nodeID))})
	if err != nil {
		t.Logf("cleanup: list images: %v", err)
		return
	}
	for _, im := range imgs {
		if _, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cleanup: remove image %s: %v", im.ID, err)
		}
	}
}
