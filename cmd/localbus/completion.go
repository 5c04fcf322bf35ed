package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: "Completes commands, flags and session ids. Install it with, for example:\n" +
			"  localbus completion bash > /etc/bash_completion.d/localbus\n" +
			"  localbus completion zsh > \"${fpath[1]}/_localbus\"\n" +
			"  localbus completion fish > ~/.config/fish/completions/localbus.fish\n" +
			"or, for the current shell only: source <(localbus completion bash)",
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, 1, "one shell: bash, zsh or fish"); err != nil {
				return err
			}
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, s)
			default:
				return usagef(c, "unknown shell %q: want bash, zsh or fish", c.Args().First())
			}
			return nil
		},
	}
}

// The scripts ask the program itself for candidates: urfave/cli answers
// "localbus ARGS --generate-bash-completion" with one candidate per line.
var bashCompletion = strings.TrimLeft(`
# bash completion for localbus
_localbus() {
  local cur words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:$COMP_CWORD}")
  if [[ "$cur" == -* ]]; then
    words+=("$cur")
  fi
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "$("${words[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}
complete -o bashdefault -o default -F _localbus localbus
`, "\n")

var zshCompletion = strings.TrimLeft(`
#compdef localbus
# zsh completion for localbus
_localbus() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _localbus localbus
`, "\n")
