package cli

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag is what urfave/cli answers with the completions of the
// words before it (App.EnableBashCompletion); the bash and zsh scripts
// below call the binary with it on every TAB. It must stay the last
// argument, so Main does not reorder such a command line.
const completionFlag = "--generate-bash-completion"

// completionCmd prints a shell's completion script for the binary name.
// bash and zsh ask the binary itself (so they follow the command tree of
// the installed version); fish gets urfave/cli's static script.
func (a *app) completionCmd(name string) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: fmt.Sprintf(`Prints the completion script of SHELL to stdout. Install it once:

  bash  echo 'source <(%[1]s completion bash)' >> ~/.bashrc
        or, for every user: %[1]s completion bash > /etc/bash_completion.d/%[1]s
  zsh   %[1]s completion zsh > "${fpath[1]}/_%[1]s"   (then start a new shell;
        compinit must run in ~/.zshrc), or source <(%[1]s completion zsh) after compinit
  fish  %[1]s completion fish > ~/.config/fish/completions/%[1]s.fish

bash and zsh complete commands, subcommands and flags by asking %[1]s itself
(on PATH, or as typed), so they follow the installed version; fish's script
lists them as they are now: print it again after an upgrade.`, name),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("completion takes SHELL, one of bash, zsh, fish (got %d argument(s)); see `%s completion --help`", c.NArg(), name)
			}
			var script string
			switch sh := c.Args().First(); sh {
			case "bash":
				script = bashCompletion(name)
			case "zsh":
				script = zshCompletion(name)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("fish completion: %w", err)
				}
				script = s
			default:
				return usageError("completion: %q is not one of bash, zsh, fish; see `%s completion --help`", sh, name)
			}
			_, err := fmt.Fprint(a.stdout, script)
			return err
		},
	}
}

// funcName is a shell function name for the binary name (shoal-lab has a
// dash, which zsh allows and bash does too, but keep it plain).
func funcName(name string) string { return "_" + strings.ReplaceAll(name, "-", "_") + "_complete" }

// bashCompletion asks the binary for the completions of the words before
// the cursor. It needs nothing of the bash-completion package and runs
// the binary with the words as arguments (no eval).
func bashCompletion(name string) string {
	return fmt.Sprintf(`# bash completion for %[1]s (%[1]s completion bash)
%[2]s() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	local words=("${COMP_WORDS[@]:1:COMP_CWORD-1}")
	[[ $cur == -* ]] && words+=("$cur")
	local IFS=$'\n'
	COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" "${words[@]}" %[3]s 2>/dev/null)" -- "$cur"))
}
complete -o bashdefault -o default -F %[2]s %[1]s
`, name, funcName(name), completionFlag)
}

// zshCompletion works from fpath (#compdef; the file _NAME autoloads as
// the function _NAME, which then completes) and sourced (compdef).
func zshCompletion(name string) string {
	return fmt.Sprintf(`#compdef %[1]s
# zsh completion for %[1]s (%[1]s completion zsh)
%[2]s() {
	local -a opts
	local cur=${words[CURRENT]}
	local -a args=("${(@)words[2,CURRENT-1]}")
	[[ $cur == -* ]] && args+=("$cur")
	opts=("${(@f)$(${words[1]} "${(@)args}" %[3]s 2>/dev/null)}")
	if [[ -n ${opts[1]} ]]; then
		compadd -a opts
	else
		_files
	fi
}
if [[ ${funcstack[1]} == %[2]s ]]; then
	%[2]s "$@"
else
	compdef %[2]s %[1]s
fi
`, name, "_"+name, completionFlag)
}
