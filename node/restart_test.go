package node_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/chaos/dockerproxy"
	"shoal/internal/testenv"
)

// startBinaryNode runs `shoal node start` as a child process so that it can
// be killed hard.
func startBinaryNode(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"node", "start"}, args...)...)
	log, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("node log:\n%s", b)
		}
	})
	return cmd
}

func dial(t *testing.T, addr string) shoalv1.ShoalClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return shoalv1.NewShoalClient(conn)
}

// d. The node is killed hard while a sandbox is DELETING and its container
// removal is in flight. After a restart on the same data dir, teardown
// completes and the container is gone.
func TestTeardownResumesAfterHardKill(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	sock := filepath.Join(t.TempDir(), "docker.sock")
	proxy, err := dockerproxy.Start(sock, "/var/run/docker.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	cfg := testenv.NodeConfig(t)
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, cfg.ID) })
	args := func(dockerHost string) []string {
		return []string{"--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api,
			"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer,
			"--docker-host", dockerHost, "--resync", "300ms", "--lease-ttl", "2s", "--log-level", "debug"}
	}
	node1 := startBinaryNode(t, bin, args("unix://"+sock)...)
	c := dial(t, api)
	testenv.Eventually(t, time.Minute, "node serving", func() (bool, error) {
		_, err := c.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{})
		return err == nil, err
	})
	mkProvider(t, ctx, c, "p")
	sb := mkSandbox(t, ctx, c, "doomed", true, "p")

	// Hold every container removal, then ask for the delete.
	proxy.SetRule(func(r *http.Request) dockerproxy.Rule {
		return dockerproxy.Rule{Hold: r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/containers/")}
	})
	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "doomed"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proxy.Held():
	case <-ctx.Done():
		t.Fatal("teardown never tried to remove the container")
	}
	if err := node1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node1.Wait()
	proxy.Release() // the held request's client is gone: it is dropped

	if _, err := dc.ContainerInspect(ctx, sb.Status.ContainerId); err != nil {
		t.Fatalf("container should survive the killed teardown: %v", err)
	}

	// Restart on the same data dir, straight on the engine.
	startBinaryNode(t, bin, args("unix:///var/run/docker.sock")...)
	testenv.Eventually(t, 2*time.Minute, "sandbox record removed after restart", func() (bool, error) {
		_, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "doomed"})
		return status.Code(err) == codes.NotFound, err
	})
	if _, err := dc.ContainerInspect(ctx, sb.Status.ContainerId); err == nil {
		t.Fatal("record gone but the container survived")
	}
	if _, err := c.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Name: "p"}); err != nil {
		t.Fatalf("provider delete after resumed teardown: %v", err)
	}
}
