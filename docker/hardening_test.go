package docker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"shoal"
	"shoal/docker"
	"shoal/internal/testenv"
)

// A sandbox container as Docker has it (docker inspect): no new
// privileges, every capability dropped but the documented few, the pids,
// memory and CPU limits, no mount at all (no Docker socket), the network
// none (never the host's), and with ReadOnlyRoot a read-only root with a
// writable tmpfs /tmp. The process inside sees the same: writing / fails
// and /tmp works, and its bounding capability set is the documented one.
func TestSandboxContainerIsHardened(t *testing.T) {
	dc := testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	r := newRuntime(t, node, "hard")
	ctx := context.Background()
	s := spec("hardened")
	s.CPUMillis, s.MemoryBytes, s.PidsLimit, s.ReadOnlyRoot = 500, 64<<20, 100, true
	id, err := r.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	in, err := dc.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	h := in.HostConfig
	if !slices.Contains(h.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("SecurityOpt %v lacks no-new-privileges", h.SecurityOpt)
	}
	if !slices.Equal(h.CapDrop, []string{"ALL"}) {
		t.Errorf("CapDrop %v, want ALL", h.CapDrop)
	}
	var added []string // the engine may spell them CAP_X
	for _, c := range h.CapAdd {
		added = append(added, strings.TrimPrefix(c, "CAP_"))
	}
	if !slices.Equal(added, docker.Capabilities) {
		t.Errorf("CapAdd %v, want %v", h.CapAdd, docker.Capabilities)
	}
	if h.PidsLimit == nil || *h.PidsLimit != 100 {
		t.Errorf("PidsLimit %v, want 100", h.PidsLimit)
	}
	if h.Memory != 64<<20 || h.NanoCPUs != 500_000_000 {
		t.Errorf("Memory %d, NanoCPUs %d", h.Memory, h.NanoCPUs)
	}
	if h.MemorySwap != h.Memory {
		t.Errorf("MemorySwap %d, want the memory limit %d (no swap)", h.MemorySwap, h.Memory)
	}
	if lc := h.LogConfig; lc.Type != "json-file" || lc.Config["max-size"] != fmt.Sprint(docker.DefaultLogMaxBytes) || lc.Config["max-file"] != fmt.Sprint(docker.DefaultLogFiles) {
		t.Errorf("LogConfig %+v, want json-file of %d bytes × %d files", lc, docker.DefaultLogMaxBytes, docker.DefaultLogFiles)
	}
	if !in.Config.NetworkDisabled {
		t.Error("network none without NetworkDisabled: the engine makes an endpoint (Docker 20.10's libnetwork deadlocks on fast endpoint churn)")
	}
	if h.NetworkMode != "none" || h.Privileged || h.PidMode != "" || h.IpcMode == "host" {
		t.Errorf("network %q privileged %v pid %q ipc %q", h.NetworkMode, h.Privileged, h.PidMode, h.IpcMode)
	}
	if len(in.Mounts) != 0 || len(h.Binds) != 0 {
		t.Errorf("mounts %v binds %v: a sandbox gets none", in.Mounts, h.Binds)
	}
	if !h.ReadonlyRootfs || !strings.Contains(h.Tmpfs["/tmp"], "rw") {
		t.Errorf("ReadonlyRootfs %v, Tmpfs %v", h.ReadonlyRootfs, h.Tmpfs)
	}
	out, code, err := execOut(ctx, r, id, "sh", "-c", "touch /x 2>/dev/null && echo root-writable; touch /tmp/x && echo tmp-ok; grep CapBnd /proc/self/status")
	if err != nil || code != 0 {
		t.Fatalf("exec: %v %d %s", err, code, out)
	}
	if strings.Contains(out, "root-writable") || !strings.Contains(out, "tmp-ok") {
		t.Errorf("inside the container: %s", out)
	}
	// CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7.
	if !strings.Contains(out, "CapBnd:\t00000000000000fb") {
		t.Errorf("bounding set inside: %s", out)
	}
}

// execOut runs a command in a container and returns its stdout.
func execOut(ctx context.Context, r *docker.Runtime, id string, cmd ...string) (string, int, error) {
	var out, errb strings.Builder
	res, err := r.Exec(ctx, id, shoal.ExecSpec{Command: cmd}, &out, &errb)
	return out.String() + errb.String(), res.ExitCode, err
}

// A sandbox that writes far more than its log bound keeps only about the
// bound: 6 MB written, 2 files of 1 MiB kept; `sandbox logs` reads the
// tail, the end marker included.
func TestSandboxLogsAreBounded(t *testing.T) {
	testenv.RequireDocker(t)
	node := nodeID()
	t.Cleanup(func() { testenv.RemoveNodeContainers(t, node) })
	r, err := docker.New(context.Background(), docker.Config{Node: node, Cluster: "logs", LogMaxBytes: 1 << 20, LogFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := spec("chatty")
	s.Command = []string{"sh", "-c", "head -c 6000000 /dev/zero | tr '\\0' x | fold -w 1000; echo end-of-output; exec sleep 3600"}
	id, err := r.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var kept int
	testenv.Eventually(t, time.Minute, "the sandbox wrote its output", func() (bool, error) {
		var out, errb strings.Builder
		if err := r.Logs(ctx, id, false, 0, &out, &errb); err != nil {
			return false, err
		}
		kept = out.Len()
		return strings.Contains(out.String(), "end-of-output"), fmt.Errorf("%d bytes so far", kept)
	})
	if kept > 2<<20 {
		t.Fatalf("the engine keeps %d bytes of 6 MB written; want at most 2 files of 1 MiB", kept)
	}
	t.Logf("6 MB written, %d bytes kept", kept)
}
