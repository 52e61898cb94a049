package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// The CLI's contract with scripts, against a real node: list and get
// shapes, multi-name deletes, and credentials from env and files.
func TestScriptContractThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()

	t.Run("list and get shapes", func(t *testing.T) {
		for _, kind := range []string{"provider", "sandbox"} {
			for _, format := range []string{"json", "yaml"} {
				r := run(t, bin, ep, kind, "list", "-o", format).must(t, 0, kind+" list, empty")
				if items := parseItems(t, format, r.stdout); len(items) != 0 {
					t.Errorf("%s list -o %s with nothing stored: %d items", kind, format, len(items))
				}
			}
		}
		runWith(t, bin, ep, runOpts{env: []string{"ONE_KEY=one-secret"}},
			"provider", "create", "one", "--type", "generic", "--credential-from-env", "ONE_KEY").must(t, 0, "provider create")
		run(t, bin, ep, "sandbox", "create", "one").must(t, 0, "sandbox create")
		for _, kind := range []string{"provider", "sandbox"} {
			for _, format := range []string{"json", "yaml"} {
				r := run(t, bin, ep, kind, "list", "-o", format).must(t, 0, kind+" list, one item")
				items := parseItems(t, format, r.stdout)
				if len(items) != 1 || items[0]["meta"].(map[string]any)["name"] != "one" {
					t.Errorf("%s list -o %s with one item: %v", kind, format, items)
				}
			}
			r := run(t, bin, ep, kind, "get", "one", "-o", "json").must(t, 0, kind+" get")
			var obj map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &obj); err != nil || obj["items"] != nil || obj["meta"].(map[string]any)["name"] != "one" {
				t.Errorf("%s get -o json is not the bare object (err %v): %s", kind, err, r.stdout)
			}
		}
		runWith(t, bin, ep, runOpts{env: []string{"TWO_KEY=x"}},
			"provider", "create", "two", "--type", "generic", "--credential-from-env", "TWO_KEY").must(t, 0, "provider create")
		r := run(t, bin, ep, "-o", "yaml", "provider", "list").must(t, 0, "provider list, two items")
		if items := parseItems(t, "yaml", r.stdout); len(items) != 2 {
			t.Errorf("provider list -o yaml with two items: %d", len(items))
		}
	})

	t.Run("sandbox delete tries every name", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			run(t, bin, ep, "sandbox", "create", name).must(t, 0, "sandbox create "+name)
		}
		r := run(t, bin, ep, "sandbox", "delete", "a", "../x", "b", "--wait").must(t, cli.ExitUsage, "delete a ../x b")
		if !strings.Contains(r.stdout, "sandbox a deleted") || !strings.Contains(r.stdout, "sandbox b deleted") {
			t.Errorf("stdout lacks a success line: %s", r.stdout)
		}
		errLines := grepLines(r.stderr, "Error:")
		// (With --wait, a non-TTY stderr also has a "deleting sandbox NAME..."
		// progress line per name; only error lines count here.)
		if len(errLines) != 1 || !strings.Contains(errLines[0], `sandbox "../x"`) {
			t.Errorf("want one error line, naming ../x; stderr:\n%s", r.stderr)
		}
		for _, name := range []string{"a", "b"} {
			run(t, bin, ep, "sandbox", "get", name).must(t, cli.ExitNotFound, "get "+name+" after delete")
		}
		// All failures of one class: that class's code, one hint.
		r = run(t, bin, ep, "sandbox", "delete", "gone1", "gone2").must(t, cli.ExitNotFound, "delete of two missing")
		if len(grepLines(r.stderr, "Error:")) != 2 || len(grepLines(r.stderr, "Hint:")) != 1 ||
			len(grepLines(r.stderr, `"gone1"`)) != 1 || len(grepLines(r.stderr, `"gone2"`)) != 1 {
			t.Errorf("two not-found: want an error line per name and one hint:\n%s", r.stderr)
		}
		// Different classes: 1.
		r = run(t, bin, ep, "sandbox", "delete", "gone1", "../x", "one").must(t, cli.ExitError, "delete of missing and invalid")
		if len(grepLines(r.stderr, "Error:")) != 2 || !strings.Contains(r.stdout, "sandbox one deleting") {
			t.Errorf("mixed failures: want two error lines and one success:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
		}
		// --ignore-not-found still skips the missing ones silently.
		r = run(t, bin, ep, "sandbox", "delete", "gone1", "../x", "--ignore-not-found").must(t, cli.ExitUsage, "ignore-not-found with invalid")
		if len(grepLines(r.stderr, "Error:")) != 1 {
			t.Errorf("--ignore-not-found: only ../x should fail:\n%s", r.stderr)
		}
		run(t, bin, ep, "sandbox", "delete", "x", "y", "--if-uid", "u").must(t, cli.ExitUsage, "--if-uid with two names")
	})

	t.Run("provider delete tries every name", func(t *testing.T) {
		r := run(t, bin, ep, "provider", "delete", "one", "../y", "two").must(t, cli.ExitUsage, "provider delete one ../y two")
		if !strings.Contains(r.stdout, "provider one deleted") || !strings.Contains(r.stdout, "provider two deleted") {
			t.Errorf("stdout lacks a success line: %s", r.stdout)
		}
		if errLines := grepLines(r.stderr, "Error:"); len(errLines) != 1 || !strings.Contains(errLines[0], `provider "../y"`) {
			t.Errorf("want one error line naming provider ../y:\n%s", r.stderr)
		}
		for _, name := range []string{"one", "two"} {
			run(t, bin, ep, "provider", "get", name).must(t, cli.ExitNotFound, "get "+name+" after delete")
		}
	})

	t.Run("credentials from a file and stdin", func(t *testing.T) {
		file := t.TempDir() + "/creds.env"
		writeFile(t, file, "# OpenAI\nOPENAI_API_KEY=sk-file\n\n")
		r := runWith(t, bin, ep, runOpts{stdin: "# from a pipe\nORG_ID=org-stdin\n", env: []string{"EXTRA=e"}},
			"provider", "create", "creds", "--credential-file", file, "--type", "openai", "--credential-file", "-",
			"--credential-from-env", "EXTRA", "-o", "json").must(t, 0, "provider create from file, stdin and env")
		for _, k := range []string{"OPENAI_API_KEY", "ORG_ID", "EXTRA"} {
			if !strings.Contains(r.stdout, k) {
				t.Errorf("created provider lacks credential %s: %s", k, r.stdout)
			}
		}
		noSecret(t, "provider create", r, "sk-file", "org-stdin")
		r = run(t, bin, ep, "provider", "create", "bad", "--type", "openai", "--credential-file", writeFile(t, t.TempDir()+"/bad.env", "sk-only-a-secret\n"))
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "bad.env line 1") {
			t.Errorf("bad line: exit %d, stderr %q", r.code, r.stderr)
		}
		noSecret(t, "bad credential file", r, "sk-only-a-secret")
		run(t, bin, ep, "provider", "get", "bad").must(t, cli.ExitNotFound, "nothing stored after a bad file")
	})
}

// 10 MiB of output from a real container arrives byte for byte.
func TestExecLargeOutputThroughBinary(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	bin := testenv.Binary(t)
	n := testenv.StartNode(t, testenv.NodeConfig(t))
	ep := n.Addr()
	run(t, bin, ep, "sandbox", "create", "big", "--wait").must(t, 0, "sandbox create")
	const size = 10 << 20
	run(t, bin, ep, "sandbox", "exec", "big", "--", "sh", "-c", "dd if=/dev/urandom of=big.bin bs=1048576 count=10 2>/dev/null").must(t, 0, "make a 10 MiB file")
	r := run(t, bin, ep, "sandbox", "exec", "big", "--", "sha256sum", "big.bin").must(t, 0, "sha256sum in the container")
	want, _, _ := strings.Cut(r.stdout, " ")
	r = run(t, bin, ep, "sandbox", "exec", "big", "--", "cat", "big.bin").must(t, 0, "cat 10 MiB")
	sum := sha256.Sum256([]byte(r.stdout))
	if len(r.stdout) != size || hex.EncodeToString(sum[:]) != want {
		t.Fatalf("exec output: %d bytes, sha256 %x; the container has %d bytes, sha256 %s", len(r.stdout), sum, size, want)
	}
	// Both streams at once, and the exit code after 10 MiB.
	r = run(t, bin, ep, "sandbox", "exec", "big", "--", "sh", "-c", "cat big.bin; echo done >&2; exit 3").must(t, 3, "cat with an exit code")
	if len(r.stdout) != size || r.stderr != "done\n" {
		t.Fatalf("exec with both streams: %d bytes on stdout, stderr %q", len(r.stdout), r.stderr)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
