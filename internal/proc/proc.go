// Package proc runs a child process with one goroutine that reaps it, so
// that its owner can wait for its exit from anywhere (Done) and never
// leaves a zombie or a goroutine behind.
package proc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a started child and the goroutine that reaps it.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has been waited for
	err  error         // Wait's result, set before done closes
}

// Start starts cmd and a goroutine that waits for it.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the child's exit (exec.Cmd.Wait's result); valid once Done is
// closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the child has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig unless the child has been reaped (its pid may be
// someone else's by then).
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits until the child is reaped.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Terminate sends SIGTERM (and SIGCONT, in case it is stopped), waits up
// to grace, then kills. It reports whether the child exited on its own.
func (p *Process) Terminate(grace time.Duration) bool {
	p.Signal(syscall.SIGTERM)
	p.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}

// Stopped reports whether every thread of the process is stopped now (a
// SIGSTOP is delivered asynchronously: until then its threads run on).
func (p *Process) Stopped() bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.Pid()))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", p.Pid(), t.Name()))
		if err != nil {
			return false
		}
		// pid (comm) STATE ...: comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false
		}
	}
	return true
}
