package agent

import (
	"strings"
	"testing"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

func TestLimits(t *testing.T) {
	l := shoal.SandboxLimits{DefaultCPUMillis: 1000, MaxCPUMillis: 2000, DefaultMemoryBytes: 1 << 30, MaxMemoryBytes: 4 << 30, Pids: 512}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if cpu, mem, err := resources(l, nil); err != nil || cpu != 1000 || mem != 1<<30 {
		t.Fatalf("defaults: %d %d %v", cpu, mem, err)
	}
	if cpu, mem, err := resources(l, &shoalv1.Resources{CpuMillis: 1500, MemoryBytes: 2 << 30}); err != nil || cpu != 1500 || mem != 2<<30 {
		t.Fatalf("within the maximums: %d %d %v", cpu, mem, err)
	}
	for _, r := range []*shoalv1.Resources{{CpuMillis: 2001}, {MemoryBytes: 4<<30 + 1}} {
		_, _, err := resources(l, r)
		if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "--sandbox-max-") {
			t.Errorf("%v over the maximum: %v", r, err)
		}
	}
}
