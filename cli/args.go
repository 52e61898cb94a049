package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Reorder moves flags ahead of positional arguments at every level of the
// command tree, so that `shoal sandbox create NAME --provider P` parses as
// `shoal sandbox create --provider P NAME`. urfave/cli v2 stops parsing
// flags at the first positional argument; this is the one place that
// lifts the restriction.
//
// Rules: "--" ends flag processing, and everything after it stays
// positional, in order. A flag that takes a value consumes the next
// argument unless written --flag=value. Global flags found after the
// command path move to the front. An unknown flag is left in place so that
// urfave/cli reports it.
func Reorder(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	globals := flagSet(app.Flags)
	out := []string{args[0]}
	var globalArgs, path, helpArgs []string
	rest := args[1:]

	// Global flags before the command path.
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "--" {
		n := flagLen(globals, rest)
		if n == 0 {
			break
		}
		globalArgs = append(globalArgs, rest[:n]...)
		rest = rest[n:]
	}
	// The command path: descend while the next argument names a subcommand.
	cmds := app.Commands
	var leaf *cli.Command
	for len(rest) > 0 {
		c := find(cmds, rest[0])
		if c == nil {
			break
		}
		path = append(path, rest[0])
		rest = rest[1:]
		leaf = c
		if len(c.Subcommands) == 0 {
			break
		}
		cmds = c.Subcommands
		// Flags of an intermediate command (and globals) may sit between
		// path elements.
		for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "--" {
			if isHelp(rest[0]) {
				// Help belongs to the command it follows, not the root:
				// `shoal sandbox --help` lists sandbox's subcommands.
				helpArgs = append(helpArgs, rest[0])
				rest = rest[1:]
				continue
			}
			if n := flagLen(globals, rest); n > 0 {
				globalArgs = append(globalArgs, rest[:n]...)
				rest = rest[n:]
				continue
			}
			break
		}
	}
	// A command with subcommands runs as a leaf when the next argument
	// names none of them and it has an action of its own (`sandbox egress
	// NAME` shows, as `sandbox egress show NAME` does). Those that have
	// none are only a path (urfave/cli gives them help as their action,
	// but when they run, after this).
	if leaf == nil || (len(leaf.Subcommands) > 0 && leaf.Action == nil) {
		return append(append(append(append(out, globalArgs...), path...), helpArgs...), rest...)
	}
	rest = append(helpArgs, rest...)
	local := flagSet(leaf.Flags)
	var flags, positional []string
	help := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if isHelp(a) {
			help = true
			continue
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			if n := flagLen(local, rest[i:]); n > 0 {
				flags = append(flags, rest[i:i+n]...)
				i += n - 1
				continue
			}
			if n := flagLen(globals, rest[i:]); n > 0 {
				globalArgs = append(globalArgs, rest[i:i+n]...)
				i += n - 1
				continue
			}
			flags = append(flags, a) // unknown: urfave/cli will say so
			continue
		}
		positional = append(positional, a)
	}
	out = append(out, globalArgs...)
	out = append(out, path...)
	if help {
		// --help anywhere before "--" asks for the command's help, as
		// with kubectl and docker (`shoal sandbox delete NAME --help`):
		// urfave/cli would take the first positional argument for the
		// subcommand to explain, and find none.
		return append(out, "--help")
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}

// flagSet maps every name and alias of flags to whether it takes a value.
func flagSet(flags []cli.Flag) map[string]bool {
	m := map[string]bool{}
	for _, f := range flags {
		takesValue := true
		if _, ok := f.(*cli.BoolFlag); ok {
			takesValue = false
		}
		if h, ok := f.(*cli.BoolFlag); ok && h.Name == "help" {
			takesValue = false
		}
		for _, n := range f.Names() {
			m[n] = takesValue
		}
	}
	m["help"], m["h"] = false, false
	return m
}

func isHelp(arg string) bool { return arg == "--help" || arg == "-h" || arg == "-help" }

// flagLen is how many arguments the flag at args[0] spans (0 if unknown).
func flagLen(known map[string]bool, args []string) int {
	name := strings.TrimLeft(args[0], "-")
	name, _, hasValue := strings.Cut(name, "=")
	takesValue, ok := known[name]
	if !ok {
		return 0
	}
	if takesValue && !hasValue && len(args) > 1 {
		return 2
	}
	return 1
}

func find(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// commandPath is the canonical names (not aliases) of the commands that
// args, as Reorder leaves them, run below the root: what a hint names.
func commandPath(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return nil
	}
	globals := flagSet(app.Flags)
	rest := args[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "--" {
		n := flagLen(globals, rest)
		if n == 0 {
			break
		}
		rest = rest[n:]
	}
	var path []string
	for cmds := app.Commands; len(rest) > 0; rest = rest[1:] {
		c := find(cmds, rest[0])
		if c == nil {
			break
		}
		path = append(path, c.Name)
		cmds = c.Subcommands
	}
	return path
}
