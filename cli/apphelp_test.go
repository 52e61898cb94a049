package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// The root help written directly is byte for byte what urfave/cli's
// template writes, for shoal's tree and for a tool's (shoal-lab's kind)
// with what else the writer covers (flag categories, arguments, lines to
// indent); an app with command categories is declined and printed by the
// template.
func TestAppHelpMatchesTheTemplate(t *testing.T) {
	tool := ToolSpec{
		Name:        "tool",
		Usage:       "a tool\nof two lines",
		Description: "line one\n\n\tindented\nlast",
		Commands: func(*Tool) []*cli.Command {
			return []*cli.Command{
				{Name: "run", Aliases: []string{"r"}, Usage: "run it\nsecond line"},
				{Name: "hidden", Hidden: true},
				{Name: "a-much-longer-name", Usage: "long"},
			}
		},
	}
	categorised := tool
	categorised.Commands = func(*Tool) []*cli.Command {
		return []*cli.Command{{Name: "run", Category: "work", Usage: "run it"}, {Name: "other", Usage: "x"}}
	}
	for _, tc := range []struct {
		name    string
		spec    ToolSpec
		change  func(*cli.App)
		decline bool
	}{
		{name: "shoal", spec: shoalSpec()},
		{name: "a tool", spec: tool},
		{name: "flag categories and arguments", spec: tool, change: func(a *cli.App) {
			a.ArgsUsage = "NAME..."
			a.Flags = append(a.Flags, &cli.BoolFlag{Name: "grouped", Category: "GROUP", Usage: "in a group"},
				&cli.DurationFlag{Name: "wait", Value: time.Second, Usage: "wait `D`\nacross lines"})
		}},
		{name: "no version, no description", spec: tool, change: func(a *cli.App) { a.HideVersion, a.Description = true, "" }},
		{name: "no flags, no commands", spec: tool, change: func(a *cli.App) {
			a.Flags, a.Commands, a.HideHelp, a.HideHelpCommand, a.HideVersion = nil, nil, true, true, true
		}},
		{name: "command categories", spec: categorised, decline: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, lookupEnv: os.LookupEnv}
			a.out = printer{w: io.Discard, errw: io.Discard, format: formatTable, now: time.Now}
			root := a.tree(tc.spec)
			if tc.change != nil {
				tc.change(root)
			}
			root.Setup()
			var want, got bytes.Buffer
			cli.HelpPrinterCustom(&want, cli.AppHelpTemplate, root, nil)
			if ok := writeAppHelp(&got, root); ok == tc.decline {
				t.Fatalf("writeAppHelp took it: %v; want %v", ok, !tc.decline)
			}
			if tc.decline {
				if got.Len() != 0 {
					t.Fatalf("declined, yet wrote %q", got.String())
				}
				got.Reset()
				printHelp(&got, cli.AppHelpTemplate, root)
			}
			if got.String() != want.String() {
				w, g := strings.Split(want.String(), "\n"), strings.Split(got.String(), "\n")
				for i := range max(len(w), len(g)) {
					var wl, gl string
					if i < len(w) {
						wl = w[i]
					}
					if i < len(g) {
						gl = g[i]
					}
					if wl != gl {
						t.Fatalf("line %d differs:\n got  %q\n want %q", i+1, gl, wl)
					}
				}
				t.Fatalf("the same lines, yet not the same bytes")
			}
			if tc.name == "no flags, no commands" {
				if strings.Contains(got.String(), "OPTIONS") || strings.Contains(got.String(), "COMMANDS") {
					t.Fatalf("the case meant to have no flags and no commands has them:\n%s", got.String())
				}
			} else if !strings.Contains(got.String(), "COMMANDS:") || !strings.Contains(got.String(), "GLOBAL OPTIONS:") {
				t.Fatalf("the help lacks its sections:\n%s", got.String())
			}
		})
	}
}
