package shoal

import (
	"fmt"
	"time"
)

// The API's limits that a client must know as well as the server: the
// size of a message either way, and the bounds of a sandbox's resources
// (the API server refuses more; the CLI says so before sending).
const (
	// MaxRequestBytes bounds any single request message.
	MaxRequestBytes = 4 << 20
	// MaxResponseBytes bounds any single response or stream message the
	// server sends; clients set their receive limit to it. List pages and
	// output chunks are cut well below it.
	MaxResponseBytes = 8 << 20
	// MaxCPUMillis and MaxMemoryBytes bound resources before the node's own
	// capacity is consulted, so that no conversion overflows.
	MaxCPUMillis   = 1 << 20 // 1048 cores
	MinCPUMillis   = 10      // Docker's smallest quota, 0.01 CPU
	MaxMemoryBytes = 1 << 46 // 64 TiB
	// ClientBufferBytes sizes the read and write buffers of a client's
	// connection (the CLI's, and a node's to its peers): a copy's data
	// crosses them in messages of 1 MiB, and gRPC's default of 32 KiB
	// costs a system call each 32 KiB (with 1 MiB the CLI and a
	// forwarding node took 15-25% less CPU for a copy, docs/benchmarks.md).
	// Servers keep the default: they hold many connections.
	ClientBufferBytes = 1 << 20
	// MaxPageSize is the largest page a list call may ask for; clients
	// that read whole lists ask for it to make the fewest round trips.
	MaxPageSize = 1000
	// DefaultStopGrace is the wait between SIGTERM and SIGKILL of a stop
	// that names none (docker stop's); MaxStopGrace the longest allowed.
	DefaultStopGrace = 10 * time.Second
	MaxStopGrace     = time.Hour
)

// SandboxLimits are what a node gives its sandboxes: a sandbox that asks
// for no CPU or memory gets the default, one that asks for more than the
// maximum is refused (ERROR, naming the flag); every container gets the
// pids cap. A zero maximum is no maximum of the node's own (the engine
// still refuses more than the host has). The agent applies them; the node
// advertises the maximums for placement.
type SandboxLimits struct {
	DefaultCPUMillis, MaxCPUMillis     int64
	DefaultMemoryBytes, MaxMemoryBytes int64
	Pids                               int64
}

// The defaults of a node's SandboxLimits.
const (
	DefaultSandboxCPUMillis   = 1000    // one core
	DefaultSandboxMemoryBytes = 1 << 30 // 1 GiB
	DefaultSandboxPids        = 512
)

// DefaultSandboxLimits are a node's limits unless its flags say otherwise.
func DefaultSandboxLimits() SandboxLimits {
	return SandboxLimits{DefaultCPUMillis: DefaultSandboxCPUMillis, DefaultMemoryBytes: DefaultSandboxMemoryBytes, Pids: DefaultSandboxPids}
}

// Validate names the flag of a bad limit.
func (l SandboxLimits) Validate() error {
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
	if l.DefaultCPUMillis > 0 && l.DefaultCPUMillis < MinCPUMillis {
		return fmt.Errorf("--sandbox-cpu-millis: %d is below Docker's smallest quota (%dm)", l.DefaultCPUMillis, MinCPUMillis)
	}
	return nil
}
