package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SweepStale removes the engines that processes which died without
// closing them left behind: a directory under Root nobody holds the lock
// of, older than a minute (a directory made a moment ago may not be locked
// yet). Its dockerd, if it still runs, is stopped first. logf hears of
// each engine removed and of what could not be.
func SweepStale(logf func(format string, args ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(Root, Prefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		lock, err := os.Open(dir)
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue // in use
		}
		logf("engine: removing the stale engine %s", dir)
		if pid := staleDockerd(dir); pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
			deadline := time.Now().Add(30 * time.Second)
			for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
				<-time.After(50 * time.Millisecond) // not our child: poll for its exit
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := removeDir(dir); err != nil {
			logf("engine: %v", err)
		}
		lock.Close()
	}
}

// staleDockerd is the pid of the dockerd serving dir, or 0.
func staleDockerd(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "docker.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	// The pid may have been reused: it is ours only if it names dir.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
		return 0
	}
	return pid
}

// removeDir removes what a stopped engine leaves: mounts under its
// directory (there are none after a clean stop), its containerd
// namespaces, and the directory.
func removeDir(dir string) error {
	errs := []error{unmountUnder(dir)}
	ns := filepath.Base(dir)
	if ctr, err := exec.LookPath("ctr"); err == nil {
		if sock, err := containerdSocket(); err == nil {
			for _, n := range []string{ns, ns + "-plugins"} {
				errs = append(errs, removeNamespace(ctr, sock, n))
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// removeNamespace deletes a containerd namespace and anything a killed
// dockerd left in it. A namespace that never existed is fine.
func removeNamespace(ctr, sock, ns string) error {
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, ctr, append([]string{"--address", sock, "--namespace", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	list, err := run("namespaces", "ls", "-q")
	if err != nil || !containsLine(list, ns) {
		return nil
	}
	if ids, err := run("containers", "ls", "-q"); err == nil {
		for id := range strings.FieldsSeq(ids) {
			run("tasks", "rm", "-f", id)
			run("containers", "rm", id)
		}
	}
	if out, err := run("namespaces", "rm", ns); err != nil {
		return fmt.Errorf("containerd namespace %s: %v: %s", ns, err, strings.TrimSpace(out))
	}
	return nil
}

func containsLine(s, line string) bool {
	for l := range strings.Lines(s) {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
