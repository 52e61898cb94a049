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

	// The environment is the one the container was made with until it
	// is started again.
	env := func() string {
		t.Helper()
		r, err := execAll(ctx, c, "cf", "sh", "-c", `echo "P_KEY=${P_KEY-unset} P_OTHER=${P_OTHER-unset} Q_KEY=${Q_KEY-unset}"; cat /kept`)
		if err != nil {
			t.Fatal(err)
		}
		return string(r.stdout)
	}
	if _, err := execAll(ctx, c, "cf", "sh", "-c", "echo a file of the sandbox > /kept"); err != nil {
		t.Fatal(err)
	}
	if got := env(); got != "P_KEY=v1 P_OTHER=o1 Q_KEY=unset\na file of the sandbox\n" {
		t.Fatalf("env before the restart: %q", got)
	}

	// A stop empties the tmpfs; the start writes the files again, and
	// gives the container its providers' current credentials in its
	// environment: a new container from the old one's files.
	restart := func() *shoalv1.Sandbox {
		t.Helper()
		if _, err := c.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Name: "cf", Wait: true}); err != nil {
			t.Fatal(err)
		}
		sb, err := c.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Name: "cf", Wait: true})
		if err != nil || sb.GetStatus().GetPhase() != shoalv1.SandboxPhase_READY {
			t.Fatalf("start: %v %v", err, sb.GetStatus())
		}
		return sb
	}
	cur := restart()
	want("the files after a stop and a start", "p/P_KEY=v2\n")
	if cond := condOf(cur, "CredentialFiles"); cond == nil || cond.Status != "True" {
		t.Fatalf("condition CredentialFiles: %+v", cond)
	}
	// P_OTHER left with the rotation: set empty (docker/refresh.go).
	if got := env(); got != "P_KEY=v2 P_OTHER= Q_KEY=unset\na file of the sandbox\n" {
		t.Fatalf("env after the restart: %q", got)
	}
	refreshed := cur.Status.ContainerId
	if refreshed == sb.Status.ContainerId {
		t.Fatal("the environment changed and the container was not made again")
	}
	if _, err := dc.ContainerInspect(context.Background(), sb.Status.ContainerId); err == nil {
		t.Fatal("the container a refresh replaced is still there")
	}
	// No credential value in the config of the image the old container's
	// files went to (what containers are made from; its record of the
	// container it was made from is Docker's, like that container's own).
	ctrInfo, err := dc.ContainerInspect(context.Background(), refreshed)
	if err != nil {
		t.Fatal(err)
	}
	img, err := dc.ImageInspect(context.Background(), ctrInfo.Image)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range img.Config.Env {
		for _, v := range []string{"v1", "o1", "v2"} {
			if strings.HasSuffix(kv, "="+v) {
				t.Fatalf("a credential value in the committed image's config: %q", img.Config.Env)
			}
		}
	}
	for _, kv := range ctrInfo.Config.Env {
		if kv == "P_KEY=v1" || kv == "P_OTHER=o1" {
			t.Fatalf("an old credential value in the new container's environment: %q", ctrInfo.Config.Env)
		}
	}
	// Nothing changed: the same container is started again.
	if again := restart(); again.Status.ContainerId != refreshed {
		t.Fatalf("a start with an unchanged environment made a new container (%s, was %s)", again.Status.ContainerId, refreshed)
	}
	// The committed image goes with the sandbox.
	if _, err := c.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Name: "cf", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ImageInspect(context.Background(), ctrInfo.Image); err == nil {
		t.Fatalf("image %s, committed for the sandbox, outlived it", ctrInfo.Image)
	}
}
