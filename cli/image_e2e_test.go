package cli_test

import (
	"testing"

	"shoal/internal/testenv"
)

// The default sandbox image (deploy/image, busybox on scratch) has a /tmp
// that anyone can write, sticky, as on any Linux: scratch has none.
func TestDefaultImageTmpWritableThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	ep := testenv.StartNode(t, testenv.NodeConfig(t)).Addr()
	run(t, bin, ep, "sandbox", "create", "tmp", "--wait").must(t, 0, "sandbox create tmp --wait")
	r := run(t, bin, ep, "sandbox", "exec", "tmp", "--", "sh", "-c", "echo x > /tmp/f && cat /tmp/f && stat -c %a /tmp").
		must(t, 0, "sandbox exec tmp -- sh -c 'echo x > /tmp/f'")
	if r.stdout != "x\n1777\n" {
		t.Errorf("/tmp in the default image: got %q, want the file's x and mode 1777", r.stdout)
	}
}
