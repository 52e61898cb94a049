package agent

import (
	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// resources are the CPU and memory a container gets under the node's
// limits (shoal.SandboxLimits).
func resources(l shoal.SandboxLimits, r *shoalv1.Resources) (cpu, mem int64, err error) {
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
