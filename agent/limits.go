package agent

import (
	"fmt"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// Limits are what a node gives its sandboxes: a sandbox that asks for no
// CPU or memory gets the default, one that asks for more than the maximum
// is refused (ERROR, naming the flag); every container gets the pids cap.
// A zero maximum is no maximum of the node's own (the engine still refuses
// more than the host has).
type Limits struct {
	DefaultCPUMillis, MaxCPUMillis     int64
	DefaultMemoryBytes, MaxMemoryBytes int64
	Pids                               int64
}

// The defaults of a node's Limits.
const (
	DefaultSandboxCPUMillis   = 1000    // one core
	DefaultSandboxMemoryBytes = 1 << 30 // 1 GiB
	DefaultSandboxPids        = 512
)

// DefaultLimits are a node's limits unless its flags say otherwise.
func DefaultLimits() Limits {
	return Limits{DefaultCPUMillis: DefaultSandboxCPUMillis, DefaultMemoryBytes: DefaultSandboxMemoryBytes, Pids: DefaultSandboxPids}
}

// resources are the CPU and memory a container gets.
func (l Limits) resources(r *shoalv1.Resources) (cpu, mem int64, err error) {
	cpu, mem = r.GetCpuMillis(), r.GetMemoryBytes()
	if cpu == 0 {
		cpu = l.DefaultCPUMillis
	}
	if mem == 0 {
		mem = l.DefaultMemoryBytes
	}
	if l.MaxCPUMillis > 0 && cpu > l.MaxCPUMillis {
		return 0, 0, shoal.FailedPrecondition("spec.resources.cpu_millis %d is above this node's maximum of %d (--sandbox-max-cpu-millis)", cpu, l.MaxCPUMillis)
	}
	if l.MaxMemoryBytes > 0 && mem > l.MaxMemoryBytes {
		return 0, 0, shoal.FailedPrecondition("spec.resources.memory_bytes %d is above this node's maximum of %d (--sandbox-max-memory-mib)", mem, l.MaxMemoryBytes)
	}
	return cpu, mem, nil
}

// Validate names the flag of a bad limit.
func (l Limits) Validate() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{{"--sandbox-cpu-millis", l.DefaultCPUMillis}, {"--sandbox-max-cpu-millis", l.MaxCPUMillis}, {"--sandbox-memory-mib", l.DefaultMemoryBytes},
		{"--sandbox-max-memory-mib", l.MaxMemoryBytes}, {"--sandbox-pids", l.Pids}} {
		if f.v < 0 {
			return fmt.Errorf("%s: %d is negative", f.flag, f.v)
		}
	}
	if l.Pids == 0 {
		return fmt.Errorf("--sandbox-pids: 0 would leave sandboxes without a process cap (a fork bomb would take the host); give the largest number a sandbox may run (default %d)", DefaultSandboxPids)
	}
	if l.MaxCPUMillis > 0 && l.DefaultCPUMillis > l.MaxCPUMillis {
		return fmt.Errorf("--sandbox-cpu-millis: %d is above --sandbox-max-cpu-millis %d", l.DefaultCPUMillis, l.MaxCPUMillis)
	}
	if l.MaxMemoryBytes > 0 && l.DefaultMemoryBytes > l.MaxMemoryBytes {
		return fmt.Errorf("--sandbox-memory-mib: %d bytes is above --sandbox-max-memory-mib (%d bytes)", l.DefaultMemoryBytes, l.MaxMemoryBytes)
	}
	if l.DefaultCPUMillis > 0 && l.DefaultCPUMillis < 10 {
		return fmt.Errorf("--sandbox-cpu-millis: %d is below Docker's smallest quota (10m)", l.DefaultCPUMillis)
	}
	return nil
}
