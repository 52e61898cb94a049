package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"shoal/agent"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

func phaseIs(ctx context.Context, c shoalv1.ShoalClient, name string, want shoalv1.SandboxPhase) func() (bool, error) {
	return func() (bool, error) {
		got, err := c.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: name})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == want, nil
	}
}

// B1. A paused container is PAUSED, with a message, and exec says why it
// cannot run; unpaused it is READY again.
func TestPausedSandbox(t *testing.T) {
	t.Parallel()
	dc := testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	sb := mkSandbox(t, ctx, n.Client, "nap", true)
	if err := dc.ContainerPause(ctx, sb.Status.ContainerId); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "sandbox PAUSED after docker pause", phaseIs(ctx, n.Client, "nap", shoalv1.SandboxPhase_PAUSED))
	got, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "nap"})
	if err != nil || !strings.Contains(got.Status.Message, "paused") {
		t.Fatalf("PAUSED without a message: %v %v", got, err)
	}
	ex, err := n.Client.Exec(ctx, &shoalv1.ExecRequest{Name: "nap", Command: []string{"true"}})
	if err == nil {
		_, err = ex.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "PAUSED") {
		t.Fatalf("exec in a paused sandbox: %v, want FAILED_PRECONDITION saying PAUSED", err)
	}
	if err := dc.ContainerUnpause(ctx, sb.Status.ContainerId); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "sandbox READY after docker unpause", phaseIs(ctx, n.Client, "nap", shoalv1.SandboxPhase_READY))
}

// B2. create --wait with a command that ends at once answers STOPPED with
// the command's exit code, not READY.
func TestCreateWaitReportsACommandThatEnded(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	for _, tc := range []struct {
		name string
		cmd  []string
		code int32
	}{{"true", []string{"true"}, 0}, {"three", []string{"sh", "-c", "exit 3"}, 3}} {
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: tc.name}, Spec: &shoalv1.SandboxSpec{Command: tc.cmd},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if sb.Status.Phase != shoalv1.SandboxPhase_STOPPED || sb.Status.ExitCode != tc.code {
			t.Fatalf("create --wait -- %q: %s exit %d (%s); want STOPPED exit %d", tc.cmd, sb.Status.Phase, sb.Status.ExitCode, sb.Status.Message, tc.code)
		}
	}
	// A command that keeps running is READY, as before.
	sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: "long"}, Spec: &shoalv1.SandboxSpec{Command: []string{"sleep", "300"}},
	}})
	if err != nil || sb.Status.Phase != shoalv1.SandboxPhase_READY {
		t.Fatalf("a long-running command: %v %v", sb, err)
	}
}

// B3. What Docker refuses reaches status.message in Docker's words, at
// once (not after retries), bounded to 1024 bytes, without credentials.
func TestDockerRefusalReachesStatus(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ctx := ctxT(t, 3*time.Minute)
	const secret = "nvapi-do-not-show-4711"
	_, err := n.Client.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta: &shoalv1.ObjectMeta{Name: "p"}, Type: shoalv1.ProviderType_NVIDIA,
		Credentials: map[string]string{"NVIDIA_API_KEY": secret},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		spec  *shoalv1.SandboxSpec
		words string
	}{
		// Docker's start fails with exit code 127 and says why in
		// State.Error. (A CPU quota below the kernel's minimum did the
		// same; the API now refuses it up front.)
		{"missing", &shoalv1.SandboxSpec{Command: []string{"/no/such/binary"}, Providers: []string{"p"}}, "no such file"},
		// An executable whose name is longer than the message bound: the
		// reason is cut, not stored whole.
		{"long", &shoalv1.SandboxSpec{Command: []string{"/" + strings.Repeat("x", 3000)}, Providers: []string{"p"}}, "Docker could not start the container"},
	} {
		start := time.Now()
		sb, err := n.Client.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{
			Meta: &shoalv1.ObjectMeta{Name: tc.name}, Spec: tc.spec,
		}})
		if err != nil {
			t.Fatal(err)
		}
		st := sb.Status
		if st.Phase != shoalv1.SandboxPhase_ERROR || !strings.Contains(st.Message, tc.words) || strings.Contains(st.Message, "exited with code") {
			t.Fatalf("%s: %s %q; want ERROR in Docker's words", tc.name, st.Phase, st.Message)
		}
		if len(st.Message) > agent.MaxMessageBytes {
			t.Fatalf("%s: status.message of %d bytes; at most %d", tc.name, len(st.Message), agent.MaxMessageBytes)
		}
		for _, c := range st.Conditions {
			if len(c.Message) > agent.MaxMessageBytes {
				t.Fatalf("%s: condition %s message of %d bytes", tc.name, c.Type, len(c.Message))
			}
		}
		if strings.Contains(st.Message, secret) {
			t.Fatalf("%s: the credential is in status.message", tc.name)
		}
		// The provisioning retries (five, with backoff) took seconds; a
		// refusal is final at once.
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("%s: ERROR after %s", tc.name, took)
		}
		// The periodic resync inspects the container (exit code 128, not
		// running) and must keep Docker's reason, not turn it into
		// "exited with code 128". Poll over several resyncs.
		for until := time.Now().Add(4 * n.Config.Resync); time.Now().Before(until); <-time.After(n.Config.Resync / 3) {
			got, err := n.Client.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: tc.name})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != shoalv1.SandboxPhase_ERROR || got.Status.Message != st.Message {
				t.Fatalf("%s after a resync: %s %q; was %q", tc.name, got.Status.Phase, got.Status.Message, st.Message)
			}
		}
	}
}
