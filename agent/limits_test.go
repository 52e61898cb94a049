package agent

import (
	"strings"
	"testing"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

func TestLimits(t *testing.T) {
	l := Limits{DefaultCPUMillis: 1000, MaxCPUMillis: 2000, DefaultMemoryBytes: 1 << 30, MaxMemoryBytes: 4 << 30, Pids: 512}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if cpu, mem, err := l.resources(nil); err != nil || cpu != 1000 || mem != 1<<30 {
		t.Fatalf("defaults: %d %d %v", cpu, mem, err)
	}
	if cpu, mem, err := l.resources(&shoalv1.Resources{CpuMillis: 1500, MemoryBytes: 2 << 30}); err != nil || cpu != 1500 || mem != 2<<30 {
		t.Fatalf("within the maximums: %d %d %v", cpu, mem, err)
	}
	for _, r := range []*shoalv1.Resources{{CpuMillis: 2001}, {MemoryBytes: 4<<30 + 1}} {
		_, _, err := l.resources(r)
		if shoal.KindOf(err) != shoal.KindFailedPrecondition || !strings.Contains(err.Error(), "--sandbox-max-") {
			t.Errorf("%v over the maximum: %v", r, err)
		}
	}
	if err := l.Validate(); err != nil {
		t.Fatalf("good limits: %v", err)
	}
	for _, bad := range []struct {
		l    Limits
		flag string
	}{
		{Limits{DefaultCPUMillis: 3000, MaxCPUMillis: 2000, Pids: 512}, "--sandbox-cpu-millis"},
		{Limits{DefaultMemoryBytes: 2, MaxMemoryBytes: 1, Pids: 512}, "--sandbox-memory-mib"},
		{Limits{Pids: -1}, "--sandbox-pids"},
		{Limits{Pids: 0}, "--sandbox-pids: 0 would leave sandboxes without a process cap"},
		{Limits{DefaultCPUMillis: 5, Pids: 512}, "--sandbox-cpu-millis"},
	} {
		if err := bad.l.Validate(); err == nil || !strings.Contains(err.Error(), bad.flag) {
			t.Errorf("%+v: %v, want an error naming %s", bad.l, err, bad.flag)
		}
	}
}
