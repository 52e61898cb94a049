package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

// A running sandbox's providers' credentials are files on a tmpfs in it,
// kept current: a rotation, an attach and a detach reach them, a start
// (which empties the tmpfs) writes them again, and a process that is not
// root cannot change them. Nothing of them is in the container's layer on
// the host's disk.
func TestCredentialFilesFollowTheProviders(t *testing.T) {
	dc := testenv.RequireDocker(t)
	cfg := testenv.NodeConfig(t)
	// No periodic resync to fall back on: every change must reach the
	// files through the watches (sandboxes, providers, Docker events).
	cfg.Resync = time.Hour
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)
	c := n.Client
	for name, creds := range map[string]map[string]string{"p": {"P_KEY": "v1", "P_OTHER": "o1"}, "q": {"Q_KEY": "q1"}} {
		if _, err := c.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
			Meta: &shoalv1.ObjectMeta{Name: name}, Type: shoalv1.ProviderType_GENERIC, Credentials: creds}}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := c.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "cf"}, Spec: &shoalv1.SandboxSpec{Providers: []string{"p"}}}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("create: %v %v", err, sb.GetStatus().GetPhase())
	}
	// files lists /run/shoal/providers as "provider/KEY=value" lines.
	files := func() (string, error) {
		r, err := execAll(ctx, c, "cf", "sh", "-c", `cd /run/shoal/providers 2>/dev/null && for f in */*; do [ -f "$f" ] && echo "$f=$(cat "$f")"; done; true`)
		return string(r.stdout), err
	}
	want := func(what, lines string) {
		t.Helper()
		start := time.Now()
		testenv.Eventually(t, 10*time.Second, what, func() (bool, error) {
			got, err := files()
			return got == lines, err
		})
		t.Logf("%s: %s", what, time.Since(start).Round(time.Millisecond))
	}
	want("the files at start", "p/P_KEY=v1\np/P_OTHER=o1\n")

	// Rotation: the new value, and only it (the goal is within 2 s; the
	// time logged includes the polling execs).
	if _, err := c.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{UpdateCredentials: true, Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p"}, Credentials: map[string]string{"P_KEY": "v2"}}}); err != nil {
		t.Fatal(err)
	}
	want("the files after a rotation", "p/P_KEY=v2\n")
	if _, err := c.AttachProvider(ctx, &shoalv1.AttachProviderRequest{Name: "cf", Provider: "q"}); err != nil {
		t.Fatal(err)
	}
	want("the files after an attach", "p/P_KEY=v2\nq/Q_KEY=q1\n")
	if _, err := c.DetachProvider(ctx, &shoalv1.DetachProviderRequest{Name: "cf", Provider: "q"}); err != nil {
		t.Fatal(err)
	}
	want("the files after a detach", "p/P_KEY=v2\n")

	// On a tmpfs, not writable by a process that is not root.
	r, err := execAll(ctx, c, "cf", "sh", "-c", "grep ' /run/shoal tmpfs ' /proc/mounts; stat -L -c %a /run/shoal/providers/p/P_KEY")
	if err != nil || !strings.Contains(string(r.stdout), "tmpfs") || !strings.HasSuffix(string(r.stdout), "444\n") {
		t.Fatalf("mount and mode: %q %v", r.stdout, err)
	}
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: "cf", User: "1000", Command: []string{"sh", "-c", "echo x > /run/shoal/providers/p/P_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ch, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ch.Exited {
			if ch.ExitCode == 0 {
				t.Fatal("a non-root process overwrote a credential file")
			}
			break
		}
	}
	changes, err := dc.ContainerDiff(context.Background(), sb.Status.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range changes {
		if strings.HasPrefix(ch.Path, "/run/shoal/") { // the mount point itself is in the layer, empty
			t.Fatalf("credential files in the container's layer on disk: %s", ch.Path)
		}
	}

	// A stop empties the tmpfs; the start writes the files again.
	if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "cf", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "cf", Wait: true}); err != nil {
		t.Fatal(err)
	}
	want("the files after a stop and a start", "p/P_KEY=v2\n")
	cur, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "cf"})
	if err != nil {
		t.Fatal(err)
	}
	if cond := condOf(cur, "CredentialFiles"); cond == nil || cond.Status != "True" {
		t.Fatalf("condition CredentialFiles: %+v", cond)
	}
}
