package shoal

import (
	"io"
	"io/fs"
	"time"
)

// The container runtime's vocabulary, owned by shoal rather than by any
// engine adapter: the agent and the API server depend on interfaces over
// these types, so a node can be given any engine (Docker today, another
// host's engine in a cluster test, a simulated one for scale tests).

// DefaultImage is the sandbox image built by `make image`, used when a
// sandbox names none.
const DefaultImage = "shoal/sandbox:dev"

// MaxContainerEnvBytes bounds a container's environment: spec.env plus the
// credentials of every attached provider. The kernel refuses to start a
// process whose arguments and environment together exceed ARG_MAX (2 MiB
// on Linux by default), and it says so only as "argument list too long"
// from inside the container; this leaves room for the command.
const MaxContainerEnvBytes = 1 << 20

// EnvBytes is the size of an environment as the kernel counts it.
func EnvBytes(env []string) int {
	n := 0
	for _, e := range env {
		n += len(e) + 1 // the NUL, and the pointer the kernel adds is ignored
	}
	return n
}

// ContainerSpec is what a sandbox's container needs.
type ContainerSpec struct {
	UID, Name, Workspace string
	Image                string
	Command              []string
	Env                  []string
	// Secrets are values (provider credentials, which are also in Env)
	// that must never appear in an error: the runtime scrubs the engine's
	// error text of them before it returns it.
	Secrets     []string
	CPUMillis   int64
	MemoryBytes int64
	// PidsLimit caps the container's processes (0: the engine's default).
	PidsLimit int64
	// ReadOnlyRoot makes the root filesystem read-only, with a tmpfs /tmp.
	ReadOnlyRoot bool
	// Settle, if positive, makes Run wait up to this long after the start
	// for the container to stop, so that a command that ends at once is
	// seen as ended, not running: an engine learns of an exit some 100 ms
	// after the process is gone.
	Settle time.Duration
	// Created makes the container without starting it (a sandbox stopped
	// before its container was made); Run then starts none it finds.
	Created bool
	// Egress: the sandbox has egress rules. Its container has no network
	// of its own whatever the node's sandbox network (package egress: the
	// only way out is the proxy), and is told the proxy (ProxyEnv).
	Egress bool
}

// EgressProxy is the address a sandbox's programs are given as their
// proxy: the egress sidecar listens there, inside the sandbox's own
// network namespace (package egress).
const EgressProxy = "http://127.0.0.1:3128"

// ProxyEnv is the environment that announces the egress proxy, in the
// upper- and lower-case forms programs read (busybox wget reads
// http_proxy; curl reads https_proxy and HTTPS_PROXY).
var ProxyEnv = []string{
	"HTTP_PROXY=" + EgressProxy, "HTTPS_PROXY=" + EgressProxy, "NO_PROXY=localhost,127.0.0.1",
	"http_proxy=" + EgressProxy, "https_proxy=" + EgressProxy, "no_proxy=localhost,127.0.0.1",
}

// EgressSidecar is what a sandbox's egress sidecar needs: the sandbox's
// uid, its running container (whose network namespace the sidecar
// joins), and the host directory holding the unix socket the node's
// proxy serves that sandbox on (bind-mounted into the sidecar alone).
type EgressSidecar struct {
	UID       string
	Container string
	Dir       string
}

// Container is what a runtime reports of one of its containers.
type Container struct {
	ID, UID, Name, Workspace, Node string
	State                          string // created, running, exited, ...
	Created                        time.Time
}

// ContainerState is the state of one container.
type ContainerState struct {
	Exists  bool
	Running bool
	// Paused is set with Running: the process exists but is frozen, so
	// exec cannot run in it.
	Paused   bool
	Status   string
	ExitCode int
	OOM      bool
	// Error is the engine's reason when it could not start the process.
	Error string
	// FinishedAt is when the process last exited (zero if it never did).
	FinishedAt time.Time
	// StartedAt is when the process last started (zero if it never did):
	// a start empties the container's tmpfs mounts.
	StartedAt time.Time
}

// ContainerEvent is a lifecycle event of one of a node's containers.
type ContainerEvent struct {
	Action   string // start, die, destroy, oom, stop, pause, unpause, ...
	ID       string
	UID      string
	ExitCode string
}

// EngineCapacity is the most an engine can give one container.
type EngineCapacity struct {
	NCPU     int
	MemTotal int64
}

// ExecEnv is the environment variable that marks a process as started by
// an exec (its value says which run of the node started it). A container's
// own environment never carries it.
const ExecEnv = "SHOAL_EXEC"

// ReapedExec is an exec that a runtime killed because an earlier run of
// its node started it and it was still running: nobody could see its
// output any more.
type ReapedExec struct {
	PID     int    // in the container's pid namespace
	Command string // the process's name
}

// ExecSpec is a command to run in a running container (an exec).
type ExecSpec struct {
	Command []string
	// Env is added to the container's environment ("K=V").
	Env []string
	// WorkDir, if set, is the command's working directory.
	WorkDir string
	// User, if set, is "UID" or "UID:GID".
	User string
	// TTY runs the command on a terminal: its output is one stream,
	// written to stdout.
	TTY bool
	// Size is the terminal's initial size (TTY only; zero: the engine's).
	Size TermSize
	// Resize carries the terminal's later sizes (TTY only; may be nil).
	// Exec reads it until the command ends; it is never closed by Exec.
	Resize <-chan TermSize
	// Timeout, if positive, kills the command's process group at this
	// deadline; the result is then ExitTimedOut, marked TimedOut.
	Timeout time.Duration
	// Stdin, if not nil, is copied to the command's standard input, which
	// is closed at its EOF. Exec closes Stdin once the command has ended,
	// so that a read blocked on it returns.
	Stdin io.ReadCloser
}

// TermSize is a terminal's size in characters.
type TermSize struct{ Rows, Cols uint }

// ExecResult is how an exec ended.
type ExecResult struct {
	ExitCode int
	// TimedOut: the spec's Timeout killed it (ExitCode is ExitTimedOut).
	TimedOut bool
}

// ExitTimedOut is the exit code of a command killed at its deadline, as
// timeout(1)'s.
const ExitTimedOut = 124

// PathStat is what a runtime reports of a path in a container's
// filesystem (its last element not followed).
type PathStat struct {
	// Name is the path's base name: the top-level entry of a copy of it
	// ("." for PATH/., a directory's contents).
	Name string
	Size int64
	// Mode holds the type and permission bits.
	Mode       fs.FileMode
	ModTime    time.Time
	LinkTarget string
}
