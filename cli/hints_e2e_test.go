package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"shoal/cli"
	"shoal/internal/testenv"
)

// commandsOf is the commands a --help output lists (first name of each,
// urfave/cli's own help command left out).
func commandsOf(help string) []string {
	_, after, ok := strings.Cut(help, "\nCOMMANDS:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "   ") {
			break // the section ends at the next heading or blank line
		}
		f := strings.Fields(line)
		name := strings.TrimSuffix(f[0], ",")
		if name != "help" {
			names = append(names, name)
		}
	}
	return names
}

// commandTree walks bin's commands through --help, requiring each to
// answer it, and returns every leaf's path.
func commandTree(t *testing.T, bin string, env []string, path []string) [][]string {
	t.Helper()
	r := runEnv(t, bin, env, append(append([]string{}, path...), "--help")...).must(t, 0, strings.Join(path, " ")+" --help")
	subs := commandsOf(r.stdout)
	if len(subs) == 0 {
		return [][]string{path}
	}
	var leaves [][]string
	for _, s := range subs {
		leaves = append(leaves, commandTree(t, bin, env, append(append([]string{}, path...), s))...)
	}
	return leaves
}

// cmdRef is a command named in backquotes: `shoal sandbox get NAME`.
var cmdRef = regexp.MustCompile("`(shoal(?:-lab)?)((?: [^`\\n]*)?)`")

// refPaths turns what a reference names into the command lines to ask
// --help of: the words up to the first one that is not a command word
// (a flag, a PLACEHOLDER, a format verb); "a|b" stands for both.
func refPaths(words string) [][]string {
	paths := [][]string{nil}
	for _, w := range strings.Fields(words) {
		if !regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$`).MatchString(w) {
			break
		}
		var next [][]string
		for _, alt := range strings.Split(w, "|") {
			for _, p := range paths {
				next = append(next, append(append([]string{}, p...), alt))
			}
		}
		paths = next
	}
	return paths
}

// Every hint and message names commands that exist: the usage errors of
// every command (too few and too many arguments, unknown commands), the
// error of a node that does not answer, and every command the cli and lab
// sources name in backquotes. Each named command answers --help with exit
// 0. Unknown commands are usage errors (exit 2), not "No help topic"
// (exit 3).
func TestHintsNameCommandsThatExist(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	dir := t.TempDir()
	env := []string{"HOME=" + dir, "SHOAL_CONFIG=" + filepath.Join(dir, "config.yaml"), "SHOAL_ENDPOINT=127.0.0.1:1"}

	var said []string // stderr of every run below
	for _, args := range [][]string{{"frob"}, {"sandbox", "frob"}, {"cluster", "member", "frob"}, {"help", "frob"}, {"sb", "frob", "--help"}} {
		r := runEnv(t, bin, env, args...).must(t, cli.ExitUsage, strings.Join(args, " "))
		if !strings.Contains(r.stderr, `unknown command "frob"`) || strings.Contains(r.stderr, "No help topic") {
			t.Errorf("shoal %s: stderr does not say unknown command:\n%s", strings.Join(args, " "), r.stderr)
		}
		said = append(said, r.stderr)
	}

	leaves := commandTree(t, bin, env, nil)
	if len(leaves) < 30 {
		t.Fatalf("walked only %d commands: %q", len(leaves), leaves)
	}
	for _, leaf := range leaves {
		what := strings.Join(leaf, " ")
		// Too many arguments for every command that takes fixed ones;
		// none for the rest (a node that does not answer for those that
		// call one). `node start` without arguments would run a node.
		tooMany := runEnv(t, bin, env, append(append([]string{}, leaf...), "a", "b", "c", "d", "e")...)
		said = append(said, tooMany.stderr)
		runs := []result{tooMany}
		if what != "node start" {
			none := runEnv(t, bin, env, leaf...)
			said = append(said, none.stderr)
			runs = append(runs, none)
		}
		// Wrong arguments are usage errors (2); anything else here did
		// what it could (0) or met the node that does not answer (5).
		for _, r := range runs {
			if r.code != 0 && r.code != cli.ExitUsage && r.code != cli.ExitUnavailable {
				t.Errorf("shoal %s (too many or no arguments): exit %d, want 0, 2 or 5:\n%s", what, r.code, r.stderr)
			}
		}
		// --help after a positional argument is the command's help, as
		// with kubectl and docker (it was "unknown command NAME").
		if r := runEnv(t, bin, env, append(append([]string{}, leaf...), "some-name", "--help")...); r.code != 0 || !strings.Contains(r.stdout, "USAGE") {
			t.Errorf("shoal %s some-name --help: exit %d, want 0 and the command's help:\n%s%s", what, r.code, r.stdout, r.stderr)
		}
		if tooMany.code == cli.ExitUsage && !strings.Contains(tooMany.stderr, "`shoal "+what+" --help`") {
			t.Errorf("shoal %s a b c d e: a usage error whose hint does not name `shoal %s --help`:\n%s", what, what, tooMany.stderr)
		}
	}

	refs := map[string]bool{}
	for _, s := range said {
		for _, m := range cmdRef.FindAllStringSubmatch(s, -1) {
			refs[m[1]+m[2]] = true
		}
	}
	fromOutput := len(refs)
	for _, pkg := range []string{".", "../lab"} {
		files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range cmdRef.FindAllStringSubmatch(string(b), -1) {
				refs[m[1]+m[2]] = true
			}
		}
	}
	t.Logf("%d commands walked; %d command references in their errors and hints, %d in all with the sources'", len(leaves), fromOutput, len(refs))

	var lab string
	sorted := make([]string, 0, len(refs))
	for r := range refs {
		sorted = append(sorted, r)
	}
	sort.Strings(sorted)
	for _, ref := range sorted {
		name, words, _ := strings.Cut(ref, " ")
		if name == "shoal" && (words == "chaos" || words == "bench") {
			continue // "`shoal chaos` moved to `shoal-lab chaos`": TestLabCommandsMovedThroughBinary
		}
		b := bin
		if name == "shoal-lab" {
			if lab == "" {
				lab = testenv.LabBinary(t)
			}
			b = lab
		}
		for _, path := range refPaths(words) {
			r := runEnv(t, b, env, append(path, "--help")...)
			if r.code != 0 || strings.Contains(r.stderr, "No help topic") || strings.Contains(r.stderr, "unknown command") {
				t.Errorf("`%s` is named in a hint or message, but `%s %s --help` exits %d:\n%s", ref, name, strings.Join(path, " "), r.code, r.stderr)
			}
		}
	}
}
