package cli_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"shoal/cli"
	"shoal/connlimit"
	"shoal/internal/testenv"
)

// floodConns is the size of the flood of idle connections.
const floodConns = 20000

// floodSource is the one address the flood comes from: a loopback address
// of its own each run, so that no TIME_WAIT left by an earlier run holds
// its ports. The CLI connects from 127.0.0.1 (the kernel's source for
// loopback): from the flood's own address the per-source cap would refuse
// it too, as it should.
func floodSource() string {
	return fmt.Sprintf("127.%d.%d.%d", rand.N(254)+1, rand.N(254)+1, rand.N(253)+2)
}

// floodChildren processes open the flood together; envFloodChild makes the
// test binary one of them: "ADDRESS N SOURCE", to dial N idle connections
// to ADDRESS from SOURCE.
const (
	floodChildren = 4
	envFloodChild = "SHOAL_FLOOD_CHILD"
)

// A flood of idle TCP connections from one address, from someone without
// a certificate, does not take a TLS node down (issue 21, "Connection
// floods"): 20,000 connections that never send a byte are opened to the
// node's API port (the built binary, hollow runtime) and held. Meanwhile
// the node's open files (/proc/PID/fd, sampled through the flood and the
// calls) stay under 2,000, `shoal node list` through that node answers in
// under a second (the median of five calls, to absorb a loaded machine's
// noise; each is logged), /readyz says ready (one address cannot saturate
// the listener), the refusals are counted in
// shoal_api_conns_refused_total{reason="source"}, and logged, once per
// connlimit.LogEvery at most. Before the cap, the node held every
// connection for grpc's two-minute handshake deadline: its files ran out
// and the CLI through it failed.
func TestConnectionFloodThroughBinary(t *testing.T) {
	if spec := os.Getenv(envFloodChild); spec != "" {
		runFloodChild(spec)
		return
	}
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	dir := t.TempDir()
	pkiDir, conf := filepath.Join(dir, "pki"), filepath.Join(dir, "config.yaml")
	env := []string{"SHOAL_CONFIG=" + conf}
	shoal := func(args ...string) result { t.Helper(); return runEnv(t, bin, env, args...) }
	shoal("certs", "init", "--dir", pkiDir, "--nodes", cfg.ID).must(t, 0, "certs init")
	api := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	shoal("config", "set-context", "flood", "--endpoint", api, "--tls-cert", filepath.Join(pkiDir, "admin.crt"),
		"--tls-key", filepath.Join(pkiDir, "admin.key"), "--tls-ca", filepath.Join(pkiDir, "ca.crt"), "--use").must(t, 0, "set-context")

	// The node starts before this process raises its own open-file limit:
	// it runs with the limit the test was given.
	nodeLog := &syncBuffer{}
	cmd := exec.Command(bin, "node", "start", "--node-id", cfg.ID, "--data-dir", cfg.DataDir, "--listen", api, "--runtime", "hollow",
		"--etcd-listen-client", strings.Replace(cfg.EtcdListenClient, "http://", "https://", 1),
		"--etcd-listen-peer", strings.Replace(cfg.EtcdListenPeer, "http://", "https://", 1),
		"--tls-cert", filepath.Join(pkiDir, cfg.ID+".crt"), "--tls-key", filepath.Join(pkiDir, cfg.ID+".key"), "--tls-ca", filepath.Join(pkiDir, "ca.crt"),
		"--metrics-listen", metricsAddr, "--log-level", "warn")
	cmd.Stderr = nodeLog
	n := startBinaryNode(t, cmd, func() result { return shoal("node", "list") })
	pid := n.Process.Pid
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node log:\n%s", nodeLog)
		}
	})
	before, err := openFiles(pid)
	if err != nil {
		t.Fatal(err)
	}

	// The node's open files, sampled until the calls are done.
	var maxFiles atomic.Int64
	maxFiles.Store(int64(before))
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if n, err := openFiles(pid); err == nil && int64(n) > maxFiles.Load() {
				maxFiles.Store(int64(n))
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	// The flood, from floodChildren processes of this test binary (one
	// process may not open 20,000 files here). Each holds its connections,
	// never writing to them, until its stdin closes at the test's end.
	start := time.Now()
	src := floodSource()
	children := make([]*floodChild, floodChildren)
	for i := range children {
		children[i] = startFloodChild(t, api, floodConns/floodChildren, src)
	}
	held, resets, failed := 0, 0, 0
	for _, c := range children {
		r := c.wait(t)
		held, resets, failed = held+r.held, resets+r.resets, failed+r.failed
		if r.failed > 0 {
			t.Logf("a flood child: %d dials failed; first: %s", r.failed, r.firstErr)
		}
	}
	t.Logf("flood: %d connections from %s in %s: %d held open by the flood, %d reset by the node before the dial returned, %d failed",
		floodConns, src, time.Since(start).Round(time.Millisecond), held, resets, failed)
	if failed > floodConns/100 {
		t.Fatalf("%d of %d dials failed (the node stopped accepting?)", failed, floodConns)
	}

	// While they are held: the CLI through the node, five times.
	var took []time.Duration
	for i := range 5 {
		t0 := time.Now()
		r := shoal("node", "list")
		d := time.Since(t0)
		t.Logf("node list %d under the flood: exit %d in %s", i+1, r.code, d.Round(time.Millisecond))
		if r.code != 0 || !regexp.MustCompile(`(?m)^`+cfg.ID+`\s+Ready`).MatchString(r.stdout) {
			t.Errorf("node list under the flood: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			d = time.Hour // a failed call is no answer: it counts as an hour
		}
		took = append(took, d)
	}
	slices.Sort(took)
	median := took[len(took)/2]
	ready, readyBody := floodGet(t, "http://"+metricsAddr+"/readyz")
	stopSampling()
	<-sampled
	after, _ := openFiles(pid)
	t.Logf("under the flood: node list median %s (fastest %s, slowest %s); node open files %d before, at most %d during, %d after; /readyz %d",
		median.Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
		before, maxFiles.Load(), after, ready)
	if median >= time.Second {
		t.Errorf("node list under the flood: median %s, want under 1s (all: %v)", median, took)
	}
	if maxFiles.Load() >= 2000 {
		t.Errorf("the node held %d open files under the flood, want under 2000", maxFiles.Load())
	}
	if ready != http.StatusOK {
		t.Errorf("/readyz under a one-address flood: %d %s, want 200", ready, readyBody)
	}
	_, exposition := floodGet(t, "http://"+metricsAddr+"/metrics")
	m := regexp.MustCompile(`(?m)^shoal_api_conns_refused_total\{reason="source"\} (\S+)$`).FindStringSubmatch(exposition)
	if m == nil {
		t.Fatalf("no shoal_api_conns_refused_total{reason=\"source\"} in /metrics")
	}
	refused, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("shoal_api_conns_refused_total{reason=\"source\"} %v", refused)
	if refused < floodConns/2 {
		t.Errorf("refused for the source cap: %v of %d", refused, floodConns)
	}
	lines := strings.Count(nodeLog.String(), "refused connections over the pending-connection cap")
	if limit := 1 + int(time.Since(start)/connlimit.LogEvery); lines < 1 || lines > limit {
		t.Errorf("%d log lines of refusals, want 1..%d (rate-limited)", lines, limit)
	}
}

// The connection-cap flags are in `node start --help`; bad values exit 2
// naming the flag, before anything starts.
func TestNodeStartBadConnFlagsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	cfg := testenv.NodeConfig(t)
	help := run(t, bin, "", "node", "start", "--help").must(t, 0, "node start --help")
	for _, flag := range []string{"--max-pending-conns N", "--max-pending-conns-per-source N", "--handshake-timeout DURATION"} {
		if !strings.Contains(help.stdout, flag) {
			t.Errorf("node start --help lacks %s:\n%s", flag, help.stdout)
		}
	}
	for _, tc := range [][]string{
		{"--max-pending-conns", "0"},
		{"--max-pending-conns-per-source", "-1"},
		{"--handshake-timeout", "0s"},
	} {
		args := append([]string{"node", "start", "--data-dir", cfg.DataDir, "--listen", "127.0.0.1:0",
			"--etcd-listen-client", cfg.EtcdListenClient, "--etcd-listen-peer", cfg.EtcdListenPeer}, tc...)
		r := run(t, bin, "", args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc[0]+": "+tc[1]) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s", tc, r.code, r.stderr, cli.ExitUsage, tc[0])
		}
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Errorf("a refused start made its data dir: %v", err)
	}
}

// floodChild is one process of the flood.
type floodChild struct {
	report chan string // its "HELD ..." line; closed without one if it exits first
}

// floodReport is what a flood child says once it has dialed them all.
type floodReport struct {
	held, resets, failed int
	firstErr             string
}

// startFloodChild starts a process of this test binary that dials n idle
// connections to addr; it exits, closing them, when the test ends.
func startFloodChild(t *testing.T, addr string, n int, src string) *floodChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnectionFloodThroughBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", envFloodChild, addr, n, src))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &floodChild{report: make(chan string, 1)}
	// The reader hands on the report line and reads on until the child
	// exits (its stdout closes), so that Wait comes after every read.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		defer close(c.report)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "HELD ") {
				c.report <- sc.Text()
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // the child closes its connections and exits
		select {
		case <-drained:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-drained
		}
		cmd.Wait()
	})
	return c
}

// wait waits (3 minutes at most) for the child's report, the line "HELD h
// RESETS r FAILED f [first error]".
func (c *floodChild) wait(t *testing.T) floodReport {
	t.Helper()
	select {
	case line, ok := <-c.report:
		if !ok {
			t.Fatal("a flood child exited without its report")
		}
		var r floodReport
		f := strings.SplitN(line, " ", 7)
		if len(f) < 6 {
			t.Fatalf("a flood child's report: %q", line)
		}
		r.held, _ = strconv.Atoi(f[1])
		r.resets, _ = strconv.Atoi(f[3])
		r.failed, _ = strconv.Atoi(f[5])
		if len(f) == 7 {
			r.firstErr = f[6]
		}
		return r
	case <-time.After(3 * time.Minute):
		t.Fatal("a flood child did not report within 3 minutes")
		return floodReport{}
	}
}

// runFloodChild is the flood child's body (spec "ADDRESS N SOURCE"): eight
// dialers from SOURCE; a connection the node resets before the dial
// returns (refused at once) holds nothing, and counts as sent.
func runFloodChild(spec string) {
	var addr, src string
	var n int64
	if _, err := fmt.Sscanf(spec, "%s %d %s", &addr, &n, &src); err != nil {
		fmt.Printf("HELD 0 RESETS 0 FAILED %d bad spec %q\n", n, spec)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		held     []net.Conn
		resets   int
		failed   int
		firstErr error
		next     atomic.Int64
		dialers  sync.WaitGroup
	)
	for range 8 {
		dialers.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
			for next.Add(1) <= n && ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				mu.Lock()
				switch {
				case err == nil:
					held = append(held, c)
				case errors.Is(err, syscall.ECONNRESET):
					resets++
				default:
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	dialers.Wait()
	line := fmt.Sprintf("HELD %d RESETS %d FAILED %d", len(held), resets, failed)
	if firstErr != nil {
		line += " " + firstErr.Error()
	}
	fmt.Println(line)
	_, _ = io.Copy(io.Discard, os.Stdin) // held until the test closes stdin
	for _, c := range held {
		c.Close()
	}
}

// openFiles counts a process's open files.
func openFiles(pid int) (int, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es), err
}

// floodGet fetches url (2s bound: a node out of files does not answer).
func floodGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
