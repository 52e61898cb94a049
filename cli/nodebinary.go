package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

// NodeBinary is the name of the server binary (cmd/shoal-node): the same
// command tree as `shoal` with the commands that run a node in it (package
// nodecmd). `shoal` links none of the server, so that every CLI call starts
// in half the time (issue 22); the two commands below run shoal-node.
const NodeBinary = "shoal-node"

// NodeCommands are `shoal node start` and `shoal cluster snapshot
// restore` for the CLI binary: each replaces the process with shoal-node
// (execve: same pid, same signals, same exit code), handing it the command
// line exactly as given, so its help, flags, completion and behaviour are
// shoal-node's own. shoal-node is looked up beside the running shoal (as
// make build and make install put it), then on PATH.
//
// cmd/shoal-node adds the real commands (nodecmd.Commands) instead.
// TestNodeCommandsMatch (package nodecmd) holds names and usages equal.
func NodeCommands() []Extension {
	return []Extension{
		{Parent: []string{"node"}, Command: delegated("start", "run a node in the foreground")},
		{Parent: []string{"cluster", "snapshot"}, Command: delegated("restore", "write a node's data dir from an etcd snapshot")},
	}
}

// delegated is the command name of the tree that execs shoal-node. Its
// flags are shoal-node's: it parses none (--help included) and declares
// none, and a completion request is answered by shoal-node too.
func delegated(name, usage string) func(*Tool) *cli.Command {
	return func(t *Tool) *cli.Command {
		run := func(*cli.Context) error { return execNode(t.a.args) }
		return &cli.Command{
			Name:            name,
			Usage:           usage,
			Description:     "Runs " + NodeBinary + ", the server binary, with this command line: its --help is shoal-node's.",
			SkipFlagParsing: true,
			Action:          run,
			BashComplete:    func(c *cli.Context) { _ = run(c) },
		}
	}
}

// execNode replaces this process with shoal-node running args (argv[0]
// becomes shoal-node's path, so that ps names the binary that runs). It
// returns only on failure.
func execNode(args []string) error {
	bin, err := findNodeBinary()
	if err != nil {
		return err
	}
	argv := append([]string{bin}, args[1:]...)
	if err := syscall.Exec(bin, argv, os.Environ()); err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	return nil // not reached: Exec returns only on failure
}

// findNodeBinary is shoal-node beside the running executable
// (NodeBinaryBeside), else on PATH. Not found is an error that says where it looked and how to get it.
func findNodeBinary() (string, error) {
	var beside string
	if self, err := os.Executable(); err == nil {
		beside = NodeBinaryBeside(self)
		if isExecutable(beside) {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(NodeBinary); err == nil {
		return p, nil
	}
	return "", &exitError{code: ExitError,
		msg:  fmt.Sprintf("this command runs %s, the server binary, which is neither beside this shoal (%s) nor on PATH", NodeBinary, beside),
		hint: "make build builds bin/" + NodeBinary + " beside bin/shoal, and make install installs both"}
}

// NodeBinaryBeside is where shoal-node belongs for the shoal binary at
// path: in the directory of the file path names, symlinks resolved (a link
// to bin/shoal has bin/shoal-node beside it). shoal looks there first; the
// lab requires it there.
func NodeBinaryBeside(shoal string) string {
	if real, err := filepath.EvalSymlinks(shoal); err == nil {
		shoal = real
	}
	return filepath.Join(filepath.Dir(shoal), NodeBinary)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
