package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/launch"
	"shoal/internal/testenv"
	"shoal/store"
)

// A node's resident memory per 10,000 cached sandboxes, above the same node
// empty (issue 22: ≤ 40 MiB). One node process (shoal node start, the
// built binary, a worker of an etcd in this process, the Docker runtime),
// so that VmRSS is that node's alone. Records are written straight to etcd
// in the shape the fleet bench's records have once READY (fleetSandbox:
// labels, a node selector, a container id, two conditions with
// timestamps), placed on a node that does not exist, so no agent acts on
// them; the node caches every one, as every shoal node does. Each point is
// read after the node's API listed every record three times (as clients
// would), so the RSS includes what serving a full list leaves behind.
//
// make bench-scale measures the same thing through a whole fleet's real
// creates; this one needs one node and about a minute. It measures once,
// whatever b.N is: run it with -benchtime 1x (make bench does).
func BenchmarkNodeRSS(b *testing.B) {
	testenv.RequireDocker(b)
	bin := testenv.Binary(b)
	c, srv := testenv.Etcd(b)
	s := store.New(c, store.Options{})
	dir := b.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	p, err := launch.Start(launch.Process{Binary: bin, Log: filepath.Join(dir, "node.log"), KillWithParent: true}, launch.Node{
		ID: "rss", Listen: addr, DataDir: filepath.Join(dir, "data"), EtcdEndpoints: []string{srv.ClientURL()},
		LogLevel: "warn", Insecure: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Terminate(10 * time.Second) })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	api := shoalv1.NewShoalClient(conn)

	// listAll lists every sandbox through the API, pages of 1,000, three
	// times, and returns how many the last list had.
	listAll := func() (int, error) {
		n := 0
		for range 3 {
			n = 0
			token := ""
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := api.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{Workspace: "default", PageSize: 1000, PageToken: token})
				cancel()
				if err != nil {
					return 0, err
				}
				n += len(resp.Items)
				if token = resp.NextPageToken; token == "" {
					break
				}
			}
		}
		return n, nil
	}
	// at waits until the node lists want records, then reads its RSS.
	at := func(want int) int64 {
		testenv.Eventually(b, 3*time.Minute, fmt.Sprintf("node listing %d sandboxes", want), func() error {
			n, err := listAll()
			if err != nil {
				return err
			}
			if n != want {
				return fmt.Errorf("it lists %d", n)
			}
			return nil
		})
		return vmRSS(b, p.Pid())
	}

	empty := at(0)
	const step = 10000
	points := []int64{empty}
	for k := 1; k <= 2; k++ {
		fillFleet(b, c, s, (k-1)*step, step)
		points = append(points, at(k*step))
	}
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(mib(empty), "MiB-empty")
	b.ReportMetric(mib(points[1]-empty), "MiB-per-10k-at-10k")
	b.ReportMetric(mib(points[2]-empty)/2, "MiB-per-10k-at-20k")
	b.Logf("node RSS: empty %.1f MiB; 10,000: %.1f MiB (+%.1f); 20,000: %.1f MiB (+%.1f, %.1f per 10,000); record %d bytes",
		mib(empty), mib(points[1]), mib(points[1]-empty), mib(points[2]), mib(points[2]-empty), mib(points[2]-empty)/2, fleetRecordSize(b))
}

// fleetSandbox is a sandbox as the fleet bench's READY records are stored:
// created with a node selector, placed, running, with the agent's
// conditions.
func fleetSandbox(name string) *shoalv1.Sandbox {
	now := timestamppb.Now()
	return &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name, Workspace: "default", Uid: uuid.NewString(), CreatedAt: now,
			Labels: map[string]string{"team": "bench", "tier": "scale"}},
		Spec: &shoalv1.SandboxSpec{Image: "shoal/sandbox:dev", Node: "elsewhere",
			NodeSelector: map[string]string{"shoal.dev/runtime": "hollow"}},
		Status: &shoalv1.SandboxStatus{Phase: shoalv1.SandboxPhase_READY, Node: "elsewhere",
			ContainerId: strings.Repeat("0123456789abcdef", 4), Message: "running",
			Conditions: []*shoalv1.Condition{
				{Type: "Scheduled", Status: "True", Reason: "Placed", Message: "placed on elsewhere", LastTransitionTime: now},
				{Type: "Ready", Status: "True", Reason: "Running", Message: "container running", LastTransitionTime: now},
			}},
	}
}

func fleetRecordSize(b *testing.B) int {
	v, err := proto.Marshal(fleetSandbox("s000000"))
	if err != nil {
		b.Fatal(err)
	}
	return len(v)
}

// fillFleet writes n fleetSandbox records from index from on, a Txn of
// 100 at a time.
func fillFleet(b *testing.B, c *clientv3.Client, s *store.Store, from, n int) {
	b.Helper()
	var ops []clientv3.Op
	for i := from; i < from+n; i++ {
		sb := fleetSandbox(fmt.Sprintf("s%06d", i))
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(sb)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(s.SandboxKey("default", sb.Meta.Name), string(v)))
		if len(ops) == 100 || i == from+n-1 {
			if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
}

// vmRSS is the resident set of process pid, in bytes.
func vmRSS(b *testing.B, pid int) int64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
