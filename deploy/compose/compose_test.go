// Package compose_test runs the compose cluster (docker-compose.yml through
// cluster.sh) as an operator would, against the host's Docker engine.
package compose_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"shoal/internal/testenv"
)

// nodeImage is the image cluster.sh runs (make node-image).
const nodeImage = "shoal/node:dev"

// Timings of the test cluster: short, so that the leader's lease and the
// killed node's liveness lease expire within seconds, yet far above what
// two busy cores delay a renewal by.
//
// The nodes' liveness TTL is the default 10 s: a live node whose renewals a
// loaded CI machine delays past its TTL is, by design, lost (its sandboxes'
// deletes then complete without it, and its containers stay frozen), which
// the test would take for a leak.
var clusterEnv = []string{
	"SHOAL_NODE_TTL=10s",
	"SHOAL_LEASE_TTL=5s",
	"SHOAL_FENCE_MARGIN=2s",
}

// j. `make cluster` as it starts by default, with mutual TLS: the README
// quickstart through one node's endpoint with the admin certificate it
// prints (a client without one is refused and told why), docker kill of
// the leader's container, then sandbox delete --wait and provider delete
// through another node; cluster.sh down (make cluster-down) leaves no
// container, network, volume or certificate of the cluster.
func TestComposeCluster(t *testing.T) {
	started := time.Now()
	requireCompose(t)
	bin := testenv.Binary(t)
	// Mutual TLS, as `make cluster` runs by default. (The leader kill below
	// once left the surviving nodes without etcd: a member listening on
	// 0.0.0.0 failed its own TLS verification when dialed at its listen
	// address, so a node's client knew only the members that had
	// published their URLs when it started.)
	c := upCluster(t, true)
	t.Logf("cluster %s up in %s: %s", c.project, time.Since(started).Round(time.Millisecond), strings.Join(c.endpoints, ","))

	// The quickstart, through n1 alone; a client without a certificate is
	// refused and told why.
	ep := c.endpoints[0]
	plain, err := runCLI(bin, ep, nil, "sandbox", "list")
	if err != nil {
		t.Fatal(err)
	}
	if plain.code != 5 || !strings.Contains(plain.stderr, "mutual TLS") {
		t.Fatalf("a plaintext client: exit %d, want 5 with a hint about mutual TLS\n%s", plain.code, plain.stderr)
	}
	const secret = "nvapi-compose-secret"
	c.cli(t, bin, ep, []string{"NVIDIA_API_KEY=" + secret},
		"provider", "create", "nvidia", "--type", "nvidia", "--credential-from-env", "NVIDIA_API_KEY").must(t, 0, "provider create")
	c.cli(t, bin, ep, nil, "sandbox", "create", "agent", "--provider", "nvidia", "--wait").must(t, 0, "sandbox create --wait")
	r := c.cli(t, bin, ep, nil, "sandbox", "exec", "agent", "--", "env").must(t, 0, "sandbox exec env")
	if !strings.Contains(r.stdout, "NVIDIA_API_KEY="+secret) {
		t.Fatalf("exec env through %s does not show the credential:\n%s", ep, r.stdout)
	}

	// A second sandbox on shoal's leader, so that killing the leader also
	// loses a sandbox's owner: its delete must wait for the fence.
	status := c.status(t, bin, ep)
	leader := status.LeaderNode
	if leader == "" || status.ClusterID == "" {
		t.Fatalf("cluster status names no leader or cluster id: %+v", status)
	}
	c.cli(t, bin, ep, nil, "sandbox", "create", "onleader", "--provider", "nvidia", "--node", leader, "--wait").must(t, 0, "sandbox create --node "+leader)
	r = c.cli(t, bin, ep, nil, "sandbox", "exec", "onleader", "--", "sh", "-c", "echo $NVIDIA_API_KEY; exit 3").must(t, 3, "sandbox exec on the leader's sandbox")
	if strings.TrimSpace(r.stdout) != secret {
		t.Fatalf("exec on %s's sandbox printed %q", leader, r.stdout)
	}

	// Kill the leader's container: no graceful resignation, no teardown.
	killed := c.container(t, leader)
	if out, err := exec.Command("docker", "kill", killed).CombinedOutput(); err != nil {
		t.Fatalf("docker kill %s (%s): %v: %s", leader, killed, err, out)
	}
	killedAt := time.Now()
	t.Logf("killed the leader %s (container %.12s)", leader, killed)

	// Everything from here goes through one node that survived.
	other := ""
	for i, n := range c.nodes {
		if n != leader {
			other = c.endpoints[i]
			break
		}
	}
	testenv.Eventually(t, time.Minute, "a new shoal leader seen through "+other, func() (bool, error) {
		st, err := c.tryStatus(bin, other)
		if err != nil {
			return false, err
		}
		return st.LeaderNode != "" && st.LeaderNode != leader, fmt.Errorf("leader is %q", st.LeaderNode)
	})
	t.Logf("new leader after %s", time.Since(killedAt).Round(time.Millisecond))
	c.cli(t, bin, other, nil, "sandbox", "delete", "agent", "onleader", "--wait", "--timeout", "60s").must(t, 0, "sandbox delete --wait through "+other)
	t.Logf("deletes done %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	c.cli(t, bin, other, nil, "provider", "delete", "nvidia").must(t, 0, "provider delete through "+other)
	r = c.cli(t, bin, other, nil, "-o", "json", "sandbox", "list").must(t, 0, "sandbox list")
	if strings.Contains(r.stdout, `"name"`) {
		t.Fatalf("sandboxes left after delete --wait:\n%s", r.stdout)
	}
	// The live owners removed their containers before the records went;
	// only the dead node's stay (fenced: the record went without them).
	out, err := exec.Command("docker", "ps", "-a", "--format", `{{.Names}} {{.Label "shoal.dev/node"}}`,
		"--filter", "label=shoal.dev/cluster="+status.ClusterID).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != leader {
			t.Errorf("container %s of live node %s outlived its sandbox's delete --wait", f[0], f[1])
		}
	}

	// make cluster-down removes it all, the killed node's sandbox
	// container (whose owner never came back to remove it) and the
	// certificates included.
	var pki string
	for _, l := range c.tls {
		if v, ok := strings.CutPrefix(l, "SHOAL_TLS_CA="); ok {
			pki = filepath.Dir(v)
		}
	}
	c.down(t)
	if left := c.leftovers(t, status.ClusterID); left != "" {
		t.Fatalf("after cluster.sh down:\n%s", left)
	}
	if _, err := os.Stat(pki); !os.IsNotExist(err) {
		t.Fatalf("the cluster's certificates %s outlived cluster.sh down: %v", pki, err)
	}
	t.Logf("whole test: %s", time.Since(started).Round(time.Millisecond))
}

// k. `make cluster` in plaintext (SHOAL_CLUSTER_TLS=0): the quickstart
// through all three nodes (exec forwarded to the owner), and cluster.sh
// down removes everything. (TestComposeCluster runs the TLS default.)
func TestComposeClusterPlaintext(t *testing.T) {
	requireCompose(t)
	bin := testenv.Binary(t)
	c := upCluster(t, false)
	ep := c.endpoints[0]
	const secret = "nvapi-compose-plain-secret"
	c.cli(t, bin, ep, []string{"NVIDIA_API_KEY=" + secret},
		"provider", "create", "nvidia", "--type", "nvidia", "--credential-from-env", "NVIDIA_API_KEY").must(t, 0, "provider create")
	c.cli(t, bin, c.endpoints[1], nil, "sandbox", "create", "agent", "--provider", "nvidia", "--wait").must(t, 0, "sandbox create --wait")
	r := c.cli(t, bin, c.endpoints[2], nil, "sandbox", "exec", "agent", "--", "env").must(t, 0, "sandbox exec env (forwarded to the owner)")
	if !strings.Contains(r.stdout, "NVIDIA_API_KEY="+secret) {
		t.Fatalf("exec env does not show the credential:\n%s", r.stdout)
	}
	status := c.status(t, bin, ep)
	c.cli(t, bin, ep, nil, "sandbox", "delete", "agent", "--wait", "--timeout", "60s").must(t, 0, "sandbox delete --wait")
	c.down(t)
	if left := c.leftovers(t, status.ClusterID); left != "" {
		t.Fatalf("after cluster.sh down:\n%s", left)
	}
}

// requireCompose skips (or with SHOAL_REQUIRE_DOCKER=1 fails) without a
// Docker engine, the sandbox image, docker-compose or the node image.
func requireCompose(t *testing.T) {
	t.Helper()
	testenv.RequireDocker(t)
	fail := func(format string, a ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, a...)
		if os.Getenv("SHOAL_REQUIRE_DOCKER") == "1" {
			t.Fatalf("SHOAL_REQUIRE_DOCKER=1 but %s", msg)
		}
		t.Skipf("skipping: %s (set SHOAL_REQUIRE_DOCKER=1 to make this a failure)", msg)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		fail("the docker CLI is not installed")
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		// cluster.sh also runs the compose v2 plugin.
		if exec.Command("docker", "compose", "version").Run() != nil {
			fail("docker-compose is not installed (apt-get install docker-compose)")
		}
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", nodeImage).CombinedOutput(); err != nil {
		fail("the node image %s is missing (run `make node-image`): %s", nodeImage, bytes.TrimSpace(out))
	}
}

type cluster struct {
	script    string
	project   string
	port      int
	env       []string
	nodes     []string
	endpoints []string
	tls       []string // SHOAL_TLS_CERT=..., _KEY, _CA: the admin's
	isDown    bool
}

// upCluster runs cluster.sh up under a project name and ports of its own,
// so that neither a leftover of an earlier run nor a developer's `make
// cluster` can collide, and registers cluster.sh down as a cleanup first.
func upCluster(t *testing.T, tls bool) *cluster {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		script:  scriptPath(t),
		project: "shoaltest" + hex.EncodeToString(b),
		port:    freePorts(t, 3),
		nodes:   []string{"n1", "n2", "n3"},
	}
	c.env = append(os.Environ(), clusterEnv...)
	if tls {
		c.env = append(c.env, "SHOAL_CLUSTER_TLS=1")
	} else {
		c.env = append(c.env, "SHOAL_CLUSTER_TLS=0")
	}
	c.env = append(c.env,
		"SHOAL_CLUSTER="+c.project,
		fmt.Sprintf("SHOAL_CLUSTER_PORT=%d", c.port),
		"SHOAL_CLUSTER_TIMEOUT=60",
		"SHOAL_NODE_IMAGE="+nodeImage,
		"XDG_STATE_HOME="+t.TempDir(), // the script's cluster-id record
	)
	t.Cleanup(func() {
		if t.Failed() {
			// What the nodes said, before down removes them.
			cmd := exec.Command("bash", c.script, "logs", "--no-color", "--tail", "200")
			cmd.Env = c.env
			out, _ := cmd.CombinedOutput()
			t.Logf("the nodes' last log lines (cluster.sh logs):\n%s", out)
		}
		if !c.isDown {
			c.down(t)
		}
	})
	out := c.script1(t, 90*time.Second, "up")
	vars := evalExports(t, out)
	c.endpoints = strings.Split(vars["SHOAL_ENDPOINT"], ",")
	// The admin client certificate: the cluster runs mutual TLS.
	for _, k := range []string{"SHOAL_TLS_CERT", "SHOAL_TLS_KEY", "SHOAL_TLS_CA"} {
		if v, ok := vars[k]; ok {
			c.tls = append(c.tls, k+"="+v)
		}
	}
	if want := map[bool]int{true: 3, false: 0}[tls]; len(c.tls) != want {
		t.Fatalf("cluster.sh up exported %d SHOAL_TLS_* variables, want %d (cert, key, CA with TLS):\n%s", len(c.tls), want, out)
	}
	if len(c.endpoints) != len(c.nodes) {
		t.Fatalf("cluster.sh up exported %d endpoints, want %d: %s", len(c.endpoints), len(c.nodes), vars["SHOAL_ENDPOINT"])
	}
	for i, ep := range c.endpoints {
		if want := fmt.Sprintf("127.0.0.1:%d", c.port+i); ep != want {
			t.Fatalf("endpoint %d is %s, want %s", i, ep, want)
		}
	}
	return c
}

// evalExports evaluates what cluster.sh printed on stdout as
// `eval "$(make -s cluster)"` does, in bash with an empty environment, and
// returns the SHOAL_* variables it exported. Every line must be an export
// and the last one SHOAL_ENDPOINT's.
func evalExports(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "export SHOAL_") {
			t.Fatalf("stdout line %q is not an export:\n%s", l, out)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "export SHOAL_ENDPOINT=") {
		t.Fatalf("the last line %q is not export SHOAL_ENDPOINT=...", last)
	}
	cmd := exec.Command("bash", "-euc", `eval "$1"; env -0`, "bash", out)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	env, err := cmd.Output()
	if err != nil {
		t.Fatalf("eval of the exports: %v\n%s", err, out)
	}
	vars := map[string]string{}
	for _, kv := range strings.Split(string(env), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "SHOAL_") {
			vars[k] = v
		}
	}
	return vars
}

// script1 runs cluster.sh COMMAND and returns its stdout; it fails the test
// (with the script's stderr) on a non-zero exit.
func (c *cluster) script1(t *testing.T, within time.Duration, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", c.script, command)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("cluster.sh %s: %v\nstdout: %s\nstderr: %s", command, err, out.String(), errb.String())
	}
	return out.String()
}

// down runs cluster.sh down (what make cluster-down runs).
func (c *cluster) down(t *testing.T) {
	t.Helper()
	c.isDown = true
	start := time.Now()
	c.script1(t, 60*time.Second, "down")
	t.Logf("cluster.sh down took %s", time.Since(start).Round(time.Millisecond))
}

// leftovers lists what of the cluster is still on the engine: containers
// of its compose project, sandbox containers of its cluster id, its
// network and its volumes.
func (c *cluster) leftovers(t *testing.T, clusterID string) string {
	t.Helper()
	var left []string
	for _, q := range [][]string{
		{"ps", "-a", "--format", "container {{.Names}} ({{.Status}})", "--filter", "label=com.docker.compose.project=" + c.project},
		{"ps", "-a", "--format", "sandbox container {{.Names}} ({{.Status}})", "--filter", "label=shoal.dev/cluster=" + clusterID},
		{"network", "ls", "--format", "network {{.Name}}", "--filter", "label=com.docker.compose.project=" + c.project},
		{"volume", "ls", "--format", "volume {{.Name}}", "--filter", "label=com.docker.compose.project=" + c.project},
	} {
		out, err := exec.Command("docker", q...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(q, " "), err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			left = append(left, s)
		}
	}
	return strings.Join(left, "\n")
}

// container returns the id of the compose container of node n.
func (c *cluster) container(t *testing.T, n string) string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-q", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+n).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) != 1 {
		t.Fatalf("node %s: %d running containers in project %s, want 1", n, len(ids), c.project)
	}
	return ids[0]
}

type result struct {
	stdout, stderr string
	code           int
	args           []string
}

func (r result) must(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s (shoal %s): exit %d, want %d\nstdout: %s\nstderr: %s", what, strings.Join(r.args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// cli runs the shoal CLI against one endpoint, with extra environment.
func (c *cluster) cli(t *testing.T, bin, endpoint string, env []string, args ...string) result {
	t.Helper()
	r, err := runCLI(bin, endpoint, append(append([]string{}, c.tls...), env...), args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runCLI(bin, endpoint string, env []string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"SHOAL_ENDPOINT=" + endpoint, "PATH=/usr/bin:/bin"}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0, args}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		return r, fmt.Errorf("shoal %s: %v", strings.Join(args, " "), err)
	}
	return r, nil
}

// clusterStatus is what the test reads of `shoal cluster status -o json`.
type clusterStatus struct {
	LeaderNode string `json:"leader_node"`
	ClusterID  string `json:"cluster_id"`
}

func (c *cluster) status(t *testing.T, bin, endpoint string) clusterStatus {
	t.Helper()
	st, err := c.tryStatus(bin, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (c *cluster) tryStatus(bin, endpoint string) (clusterStatus, error) {
	var st clusterStatus
	r, err := runCLI(bin, endpoint, c.tls, "-o", "json", "cluster", "status")
	if err != nil {
		return st, err
	}
	if r.code != 0 {
		return st, fmt.Errorf("cluster status through %s: exit %d: %s", endpoint, r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		return st, fmt.Errorf("cluster status -o json: %v: %s", err, r.stdout)
	}
	return st, nil
}

// freePorts returns the first of n consecutive loopback ports that nobody
// listens on now, from a random start so that parallel runs differ.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		// Below Linux's ephemeral range (32768-60999), so that no
		// outgoing connection takes one of them meanwhile.
		r, err := rand.Int(rand.Reader, big.NewInt(12000))
		if err != nil {
			t.Fatal(err)
		}
		base := 20000 + int(r.Int64())
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found", n)
	return 0
}
