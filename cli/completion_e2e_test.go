package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// `shoal completion SHELL` prints a script each shell accepts; the bash
// one completes subcommands and flags by asking the binary; no shell or
// an unknown one is a usage error; --help says how to install each.
func TestCompletionThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	run(t, bin, "", "completion").must(t, cli.ExitUsage, "completion without a shell")
	r := run(t, bin, "", "completion", "tcsh").must(t, cli.ExitUsage, "completion tcsh")
	if !strings.Contains(r.stderr, `"tcsh" is not one of bash, zsh, fish`) {
		t.Errorf("completion tcsh: stderr does not name the shells:\n%s", r.stderr)
	}
	run(t, bin, "", "completion", "bash", "zsh").must(t, cli.ExitUsage, "completion bash zsh")
	r = run(t, bin, "", "completion", "--help").must(t, 0, "completion --help")
	for _, want := range []string{"~/.bashrc", "/etc/bash_completion.d/shoal", `"${fpath[1]}/_shoal"`, "~/.config/fish/completions/shoal.fish"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("completion --help does not say %q:\n%s", want, r.stdout)
		}
	}

	dir := t.TempDir()
	script := func(shell string) string {
		r := run(t, bin, "", "completion", shell).must(t, 0, "completion "+shell)
		path := filepath.Join(dir, shell)
		if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	syntax := func(shell, path string) {
		t.Helper()
		sh, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s not installed: its script's syntax is not checked", shell)
			return
		}
		if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s -n rejects `shoal completion %s`: %v\n%s", shell, shell, err, out)
		}
	}

	bash := script("bash")
	syntax("bash", bash)
	if _, err := exec.LookPath("bash"); err == nil {
		// What bash does on TAB: COMP_WORDS up to the cursor, then the
		// function the script registered for shoal.
		complete := func(words ...string) []string {
			t.Helper()
			prog := `source "$1"; shift
complete -p shoal >/dev/null || { echo "no completion registered for shoal" >&2; exit 1; }
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
_shoal_complete
printf '%s\n' "${COMPREPLY[@]}"`
			cmd := exec.Command("bash", append([]string{"-c", prog, "bash", bash, bin}, words...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("completing %q: %v", words, err)
			}
			return strings.Fields(string(out))
		}
		for _, tc := range []struct {
			words []string
			want  []string
		}{
			{[]string{"sand"}, []string{"sandbox", "sandboxes"}},
			{[]string{"sandbox", "cr"}, []string{"create"}},
			{[]string{"-o", "json", "provider", "up"}, []string{"update"}},
			{[]string{"sandbox", "create", "--pro"}, []string{"--provider"}},
			// Flags after a positional argument, as shoal allows them.
			{[]string{"sandbox", "create", "agent", "--pro"}, []string{"--provider"}},
			{[]string{"comp"}, []string{"completion"}},
			// egress: subcommands beside an action of its own, and its flags.
			{[]string{"sandbox", "egress", "re"}, []string{"remove"}},
			{[]string{"sandbox", "egress", "set", "agent", "--if"}, []string{"--if-version"}},
			{[]string{"sandbox", "create", "agent", "--egress-a"}, []string{"--egress-allow"}},
			{[]string{"sandbox", "logs", "agent", "--eg"}, []string{"--egress"}},
		} {
			if got := complete(tc.words...); !slices.Equal(got, tc.want) {
				t.Errorf("shoal %s<TAB>: completed %q, want %q", strings.Join(tc.words, " "), got, tc.want)
			}
		}
	}

	zsh := script("zsh")
	syntax("zsh", zsh)
	if b, _ := os.ReadFile(zsh); !strings.HasPrefix(string(b), "#compdef shoal\n") || !strings.Contains(string(b), "compdef _shoal shoal") {
		t.Errorf("the zsh script neither autoloads (#compdef shoal) nor registers when sourced:\n%s", b)
	}
	fish := script("fish")
	syntax("fish", fish)
	if b, _ := os.ReadFile(fish); !strings.Contains(string(b), "complete -c shoal ") || !strings.Contains(string(b), "sandbox") {
		t.Errorf("the fish script completes no shoal command:\n%s", b)
	}
}
