package compose_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cluster.sh env (what up prints last, without a cluster): lines that eval
// accepts and that export exactly the admin certificate's files and the
// endpoints, also for a state directory whose path needs quoting. Without
// the certificates it refuses, saying why.
func TestClusterEnvExports(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("skipping: bash not found (%v)", err)
	}
	script := scriptPath(t)
	state := filepath.Join(t.TempDir(), `it's "a" $HOME`)
	pki := filepath.Join(state, "shoal", "compose", "envtest-pki")
	env := []string{"PATH=/usr/bin:/bin", "XDG_STATE_HOME=" + state, "SHOAL_CLUSTER=envtest", "SHOAL_CLUSTER_PORT=17461"}
	clusterEnv := func(extra ...string) (string, string, error) {
		cmd := exec.Command("bash", script, "env")
		cmd.Env = append(append([]string{}, env...), extra...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	out, stderr, err := clusterEnv()
	if err == nil || !strings.Contains(stderr, "no certificates in "+pki) {
		t.Fatalf("cluster.sh env without certificates: err %v, stdout %q, stderr %q; want a refusal naming %s", err, out, stderr, pki)
	}

	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki, "admin.crt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoints := "127.0.0.1:17461,127.0.0.1:17462,127.0.0.1:17463"
	for _, tc := range []struct {
		tls  string
		want map[string]string
	}{
		{"1", map[string]string{
			"SHOAL_TLS_CERT": filepath.Join(pki, "admin.crt"), "SHOAL_TLS_KEY": filepath.Join(pki, "admin.key"),
			"SHOAL_TLS_CA": filepath.Join(pki, "ca.crt"), "SHOAL_ENDPOINT": endpoints}},
		{"0", map[string]string{"SHOAL_ENDPOINT": endpoints}},
	} {
		out, stderr, err := clusterEnv("SHOAL_CLUSTER_TLS=" + tc.tls)
		if err != nil {
			t.Fatalf("SHOAL_CLUSTER_TLS=%s cluster.sh env: %v\n%s", tc.tls, err, stderr)
		}
		got := evalExports(t, out)
		if len(got) != len(tc.want) {
			t.Errorf("SHOAL_CLUSTER_TLS=%s: exported %q, want %q\n%s", tc.tls, got, tc.want, out)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("SHOAL_CLUSTER_TLS=%s: %s=%q, want %q\n%s", tc.tls, k, got[k], v, out)
			}
		}
	}
}

// scriptPath is cluster.sh of this package: go test runs its tests in the
// package's directory.
func scriptPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
