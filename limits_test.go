package shoal

import (
	"strings"
	"testing"
)

func TestSandboxLimitsValidate(t *testing.T) {
	if err := DefaultSandboxLimits().Validate(); err != nil {
		t.Fatalf("default limits: %v", err)
	}
	good := SandboxLimits{DefaultCPUMillis: 1000, MaxCPUMillis: 2000, DefaultMemoryBytes: 1 << 30, MaxMemoryBytes: 4 << 30, Pids: 512}
	if err := good.Validate(); err != nil {
		t.Fatalf("good limits: %v", err)
	}
	for _, bad := range []struct {
		l    SandboxLimits
		flag string
	}{
		{SandboxLimits{DefaultCPUMillis: 3000, MaxCPUMillis: 2000, Pids: 512}, "--sandbox-cpu-millis"},
		{SandboxLimits{DefaultMemoryBytes: 2, MaxMemoryBytes: 1, Pids: 512}, "--sandbox-memory-mib"},
		{SandboxLimits{Pids: -1}, "--sandbox-pids"},
		{SandboxLimits{Pids: 0}, "--sandbox-pids: 0 would leave sandboxes without a process cap"},
		{SandboxLimits{DefaultCPUMillis: 5, Pids: 512}, "--sandbox-cpu-millis"},
	} {
		if err := bad.l.Validate(); err == nil || !strings.Contains(err.Error(), bad.flag) {
			t.Errorf("%+v: %v, want an error naming %s", bad.l, err, bad.flag)
		}
	}
}
