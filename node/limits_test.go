package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// A node's sandbox limits reach the containers (docker inspect): a
// sandbox that asks for nothing gets the node's defaults, one that asks
// within the maximums gets what it asked for, every one gets the pids cap;
// one that asks for more than the maximums is refused at create, naming
// the field and the flag, and no record or container is made for it.
func TestSandboxLimitsFromTheNode(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	cfg.SandboxLimits = shoal.SandboxLimits{DefaultCPUMillis: 250, MaxCPUMillis: 500, DefaultMemoryBytes: 96 << 20, MaxMemoryBytes: 128 << 20, Pids: 64}
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 2*time.Minute)
	create := func(name string, res *shoalv1.Resources) (*shoalv1.Sandbox, error) {
		return n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: name}, Spec: &shoalv1.SandboxSpec{Resources: res}}})
	}
	for _, c := range []struct {
		name     string
		res      *shoalv1.Resources
		cpu, mem int64
	}{
		{"defaults", nil, 250, 96 << 20},
		{"within", &shoalv1.Resources{CpuMillis: 500, MemoryBytes: 128 << 20}, 500, 128 << 20},
		{"cpu-only", &shoalv1.Resources{CpuMillis: 100}, 100, 96 << 20},
	} {
		sb, err := create(c.name, c.res)
		if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
			t.Fatalf("%s: %v %v", c.name, sb.GetStatus(), err)
		}
		in, err := dc.ContainerInspect(ctx, sb.Status.ContainerId)
		if err != nil {
			t.Fatal(err)
		}
		h := in.HostConfig
		if h.NanoCPUs != c.cpu*1_000_000 || h.Memory != c.mem || h.PidsLimit == nil || *h.PidsLimit != 64 {
			t.Errorf("%s: NanoCPUs %d Memory %d PidsLimit %v; want %d, %d, 64", c.name, h.NanoCPUs, h.Memory, h.PidsLimit, c.cpu*1_000_000, c.mem)
		}
	}
	for _, c := range []struct {
		name, field, flag string
		res               *shoalv1.Resources
	}{
		{"much-cpu", "sandbox.spec.resources.cpu_millis", "--sandbox-max-cpu-millis", &shoalv1.Resources{CpuMillis: 501}},
		{"much-memory", "sandbox.spec.resources.memory_bytes", "--sandbox-max-memory-mib", &shoalv1.Resources{MemoryBytes: 128<<20 + 1}},
	} {
		_, err := create(c.name, c.res)
		if msg := fmt.Sprint(err); status.Code(err) != codes.FailedPrecondition ||
			!strings.Contains(msg, c.field) || !strings.Contains(msg, c.flag) {
			t.Errorf("%s: %v; want FAILED_PRECONDITION naming %s and %s", c.name, err, c.field, c.flag)
		}
		if _, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: c.name}); status.Code(err) != codes.NotFound {
			t.Errorf("%s: a refused create left a record: %v", c.name, err)
		}
		list, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "shoal.dev/name="+c.name))})
		if err != nil || len(list) != 0 {
			t.Errorf("%s: containers %v (%v)", c.name, list, err)
		}
	}
}
