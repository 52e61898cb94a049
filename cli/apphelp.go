package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// Help is printed in one write, and the root's (`shoal --help`, the
// command people run most to find their way) without text/template: the
// template's parse (urfave/cli parses twelve of them on every help) and
// its reflective execution were most of the time --help took beyond the
// process's start, and the help went out in 182 writes.
//
// writeAppHelp writes what urfave/cli's AppHelpTemplate writes for the
// apps this package builds, byte for byte (TestAppHelpMatchesTheTemplate);
// an app that uses what it does not write (usage text, authors,
// copyright, command categories) is declined and goes to the template.

var helpPrinterOnce sync.Once

// bufferHelp makes urfave/cli print help through printHelp.
func bufferHelp() { helpPrinterOnce.Do(func() { cli.HelpPrinter = printHelp }) }

// printHelp renders help into a buffer and writes it once.
func printHelp(w io.Writer, templ string, data any) {
	var buf bytes.Buffer
	if app, ok := data.(*cli.App); !ok || templ != cli.AppHelpTemplate || !writeAppHelp(&buf, app) {
		buf.Reset()
		cli.HelpPrinterCustom(&buf, templ, data, nil)
	}
	_, _ = w.Write(buf.Bytes())
}

// urfave/cli's help writer: a tabwriter of these settings over the
// template's output, and wrap's line length (which no line reaches).
const (
	helpMinWidth, helpTabWidth, helpPadding = 1, 8, 2
	helpWrapAt                              = 10000
)

// writeAppHelp writes app's help as AppHelpTemplate does, or reports
// false (having written nothing) for an app it does not cover.
func writeAppHelp(out *bytes.Buffer, app *cli.App) bool {
	if app.UsageText != "" || len(app.Authors) > 0 || app.Copyright != "" || app.CustomAppHelpTemplate != "" {
		return false
	}
	cats := app.VisibleCategories()
	for _, c := range cats {
		if c.Name() != "" {
			return false
		}
	}
	var b strings.Builder
	b.WriteString("NAME:\n   ")
	b.WriteString(helpWrap(app.HelpName, 3))
	if app.Usage != "" {
		b.WriteString(" - ")
		b.WriteString(helpWrap(app.Usage, len(app.HelpName)+6))
	}
	b.WriteString("\n\nUSAGE:\n   ")
	b.WriteString(app.HelpName)
	b.WriteString(" ") // the template's, flags or not
	if len(app.VisibleFlags()) > 0 {
		b.WriteString("[global options]")
	}
	if len(app.Commands) > 0 {
		b.WriteString(" command [command options]")
	}
	if app.ArgsUsage != "" {
		b.WriteString(" " + app.ArgsUsage)
	} else if app.Args {
		b.WriteString(" [arguments...]")
	}
	if app.Version != "" && !app.HideVersion {
		b.WriteString("\n\nVERSION:\n   ")
		b.WriteString(app.Version)
	}
	if app.Description != "" {
		b.WriteString("\n\nDESCRIPTION:\n   ")
		b.WriteString(helpWrap(app.Description, 3))
	}
	if len(app.VisibleCommands()) > 0 {
		b.WriteString("\n\nCOMMANDS:")
		for _, c := range cats {
			cmds := c.VisibleCommands()
			width := 0
			for _, cmd := range cmds {
				width = max(width, len(strings.Join(cmd.Names(), ", ")))
			}
			col := width + 5
			for _, cmd := range cmds {
				s := strings.Join(cmd.Names(), ", ")
				b.WriteString("\n   ")
				b.WriteString(s)
				b.WriteString(strings.Repeat(" ", col-(len(s)+3)))
				b.WriteString(helpWrap(cmd.Usage, col))
			}
		}
	}
	if fcats := app.VisibleFlagCategories(); len(fcats) > 0 {
		b.WriteString("\n\nGLOBAL OPTIONS:")
		for _, fc := range fcats {
			b.WriteString("\n   ")
			if fc.Name() != "" {
				b.WriteString(fc.Name())
				b.WriteString("\n\n   ")
			}
			flags := fc.Flags()
			for i, f := range flags {
				b.WriteString(fmt.Sprint(f))
				if i == len(flags)-1 {
					b.WriteString("\n")
				} else {
					b.WriteString("\n   ")
				}
			}
		}
	} else if flags := app.VisibleFlags(); len(flags) > 0 {
		b.WriteString("\n\nGLOBAL OPTIONS:")
		for _, f := range flags {
			b.WriteString("\n   ")
			b.WriteString(helpWrap(fmt.Sprint(f), 6))
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(out, helpMinWidth, helpTabWidth, helpPadding, ' ', 0)
	_, _ = io.WriteString(tw, b.String())
	_ = tw.Flush()
	return true
}

// helpWrap is urfave/cli's wrap at its line length: every line after the
// first indented by offset, a line longer than the length folded at
// words.
func helpWrap(input string, offset int) string {
	lines := strings.Split(input, "\n")
	pad := strings.Repeat(" ", offset)
	for i, line := range lines {
		if line == "" {
			continue
		}
		line = helpWrapLine(line, offset, pad)
		if i > 0 {
			line = pad + line
		}
		lines[i] = line
	}
	return strings.Join(lines, "\n")
}

func helpWrapLine(input string, offset int, pad string) string {
	if helpWrapAt <= offset || len(input) <= helpWrapAt-offset {
		return input
	}
	words := strings.Fields(input)
	if len(words) == 0 {
		return input
	}
	width := helpWrapAt - offset
	var b strings.Builder
	b.WriteString(words[0])
	left := width - len(words[0])
	for _, w := range words[1:] {
		if len(w)+1 > left {
			b.WriteString("\n" + pad + w)
			left = width - len(w)
		} else {
			b.WriteString(" " + w)
			left -= 1 + len(w)
		}
	}
	return b.String()
}
