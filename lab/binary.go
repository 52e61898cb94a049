package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	shoalcli "shoal/cli"
)

// shoalBinaryFlag is --shoal-binary of every command that starts nodes.
func shoalBinaryFlag() cli.Flag {
	return &cli.StringFlag{Name: "shoal-binary", Usage: "the shoal executable at `PATH` runs the nodes, through the shoal-node beside it (default: the shoal next to shoal-lab, else shoal on PATH); with --cluster shoal-node must be static, as make build builds it"}
}

// shoalBinary is the shoal executable the nodes run: flag (--shoal-binary)
// when given, else the shoal next to this shoal-lab, else shoal on PATH.
// os.Executable is shoal-lab itself, which has no `node start`: the
// default of chaos and scale cannot be the running binary any more.
func shoalBinary(flag string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	return findShoal(flag, self)
}

// findShoal is shoalBinary with self, the running shoal-lab, given.
func findShoal(flag, self string) (string, error) {
	var bin string
	switch {
	case flag != "":
		abs, err := filepath.Abs(flag)
		if err != nil {
			return "", shoalcli.UsageError("--shoal-binary %s: %v", flag, err)
		}
		if err := executable(abs); err != nil {
			return "", shoalcli.UsageError("--shoal-binary %s: %v", flag, err)
		}
		bin = abs
	default:
		next := ""
		if self != "" {
			next = filepath.Join(filepath.Dir(self), "shoal")
		}
		if next != "" && executable(next) == nil {
			bin = next
		} else if p, err := exec.LookPath("shoal"); err == nil {
			if bin, err = filepath.Abs(p); err != nil {
				return "", shoalcli.UsageError("shoal on PATH (%s): %v", p, err)
			}
		} else {
			where := "next to shoal-lab"
			if next != "" {
				where = fmt.Sprintf("next to shoal-lab (%s)", next)
			}
			return "", shoalcli.UsageError("no shoal binary to run the nodes: none %s and none on PATH; "+
				"make build builds bin/shoal beside bin/shoal-lab, or give --shoal-binary PATH", where)
		}
	}
	if err := isShoal(bin); err != nil {
		return "", err
	}
	// shoal runs the server beside it for `node start`, and the hosts'
	// image is built from that file: it must be there.
	if node := shoalcli.NodeBinaryBeside(bin); executable(node) != nil {
		return "", shoalcli.UsageError("no %s beside %s (%s): the nodes run it (`shoal node start` does); make build builds bin/%s beside bin/shoal", shoalcli.NodeBinary, bin, node, shoalcli.NodeBinary)
	}
	return bin, nil
}

// executable checks that path is a regular file someone may execute.
func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// isShoal asks bin for its version: the nodes run `shoal node start`, and
// with --cluster the binary is copied into the hosts' image, so shoal-lab
// (or anything else) given by mistake is refused here, before a run
// starts. --version is answered before the config file is read.
func isShoal(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	first, _, _ := strings.Cut(out.String(), "\n")
	switch {
	case strings.HasPrefix(first, "shoal version "):
		return nil
	case strings.HasPrefix(first, "shoal-lab "):
		return shoalcli.UsageError("%s is shoal-lab, not shoal: the nodes run the shoal binary (`shoal node start`); give it with --shoal-binary", bin)
	case err != nil:
		return shoalcli.UsageError("%s is not a shoal binary: `%s --version` failed: %v %q", bin, bin, err, first)
	}
	return shoalcli.UsageError("%s is not a shoal binary: `%s --version` printed %q", bin, bin, first)
}
