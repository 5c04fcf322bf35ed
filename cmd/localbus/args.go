package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs moves the flags of the command named in args before its
// arguments, so "localbus session show ID --json" parses as
// "localbus session show --json ID": urfave/cli, like Go's flag package,
// stops at the first argument. Only the last command's part moves; what
// follows "--" stays an argument, as does "-" (stdin); a flag that takes a
// value keeps it ("--since 0", "--types=a,b"), and a one-letter flag
// joined to its value is split ("-n5" becomes "-n 5"). A flag the command does not
// know is moved too, so that it is reported as unknown rather than taken for
// an argument. Flags given before the command, "localbus --socket S
// status", are the command's too (localbus itself has only --help and
// --version). args[0] is the program name. args are returned unchanged
// when they name no command, a command that parses its own flags, or end
// in a flag that lacks its value.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		return args // shell completion looks for its flag at the end
	}
	args = leadingFlagsAfterCommand(app, args)
	var cmd *cli.Command
	cmds := app.Commands
	i := 1
	for ; i < len(args); i++ {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
	}
	if cmd == nil || cmd.SkipFlagParsing {
		return args
	}
	takesValue := flagValues(cmd.Flags)
	var flags, rest []string
	dashdash := false
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			rest = append(rest, args[j+1:]...)
			dashdash = true
			j = len(args)
		case len(a) > 1 && a[0] == '-':
			if flag, value, ok := joinedShort(a, takesValue); ok {
				flags = append(flags, flag, value)
				continue
			}
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if takesValue[name] {
				if j+1 == len(args) {
					return args // its value is missing: let the parser say so
				}
				j++
				flags = append(flags, args[j])
			}
		default:
			rest = append(rest, a)
		}
	}
	out := append(slices.Clip(args[:i]), flags...)
	if dashdash || slices.ContainsFunc(rest, func(a string) bool { return len(a) > 1 && a[0] == '-' }) {
		out = append(out, "--")
	}
	return append(out, rest...)
}

// leadingFlagsAfterCommand moves the flags that come before the command
// path in args to just after it: "localbus --socket S session show ID"
// becomes "localbus session show --socket S ID". Whether a leading flag
// takes a value is what any command's flag of that name does, unless the
// word after it names a command. args are returned unchanged when they
// start with no flag, with one of localbus's own (--help, --version), or
// when no command follows the flags.
func leadingFlagsAfterCommand(app *cli.App, args []string) []string {
	own := flagValues(app.Flags)
	own["help"], own["h"] = false, false // the flags urfave/cli adds
	own["version"], own["v"] = false, false
	takesValue := map[string]bool{}
	for _, f := range allFlags(app.Commands) {
		for n, v := range flagValues([]cli.Flag{f}) {
			takesValue[n] = takesValue[n] || v
		}
	}
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := own[name]; ok {
			return args
		}
		if !hasValue && takesValue[name] && i+1 < len(args) && findCommand(app.Commands, args[i+1]) == nil {
			i++
		}
	}
	if i == 1 || i == len(args) || findCommand(app.Commands, args[i]) == nil {
		return args
	}
	end := i
	for cmds := app.Commands; end < len(args); end++ {
		c := findCommand(cmds, args[end])
		if c == nil {
			break
		}
		cmds = c.Subcommands
	}
	out := append([]string{args[0]}, args[i:end]...)
	out = append(out, args[1:i]...)
	return append(out, args[end:]...)
}

// allFlags returns the flags of cmds and of their subcommands, each
// command once. The tree may hold a cycle: urfave/cli appends its shared
// help command to the subcommands of every command it runs, the help
// command itself included, so once "localbus help" has run in a process the
// help command is its own subcommand.
func allFlags(cmds []*cli.Command) []cli.Flag {
	var flags []cli.Flag
	seen := map[*cli.Command]bool{}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			if seen[c] {
				continue
			}
			seen[c] = true
			flags = append(flags, c.Flags...)
			walk(c.Subcommands)
		}
	}
	walk(cmds)
	return flags
}

// joinedShort splits a one-letter flag joined to its value, "-n5", into
// "-n" and "5", as getopt reads it and Go's flag package does not: only
// when the letter's flag takes a value and the whole is no flag's name.
func joinedShort(a string, takesValue map[string]bool) (flag, value string, ok bool) {
	if len(a) < 3 || a[1] == '-' || strings.Contains(a, "=") || !takesValue[a[1:2]] {
		return "", "", false
	}
	if _, known := takesValue[a[1:]]; known {
		return "", "", false
	}
	return a[:2], a[2:], true
}

// findCommand returns the command of cmds named or aliased name, or nil.
func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// flagValues maps every name of flags to whether the flag takes a value.
func flagValues(flags []cli.Flag) map[string]bool {
	m := make(map[string]bool)
	for _, f := range flags {
		v := true
		if tv, ok := f.(interface{ TakesValue() bool }); ok {
			v = tv.TakesValue()
		}
		for _, n := range f.Names() {
			m[n] = v
		}
	}
	return m
}

// didYouMean returns ` (did you mean "X"?)` for the candidate closest to
// name, when one is close enough to be a typo of it, else "". A
// one-letter name (-x) is too short to guess from.
func didYouMean(name string, candidates []string) string {
	if len(strings.TrimLeft(name, "-")) < 2 {
		return ""
	}
	best, bestDist := "", 0
	for _, c := range candidates {
		d := editDistance(name, c)
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len(name) <= 3 {
		limit = 1
	}
	if best == "" || (bestDist > limit && !strings.HasPrefix(best, name)) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment) between a and b: a swap of two neighbours counts once.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// commandNames returns the visible names of cmds.
// groupAction is the Action of a command that only holds subcommands
// (session, keys): with none, or an unknown one, it names the subcommands
// and exits 1, with a did-you-mean for a near miss.
func groupAction(c *cli.Context) error {
	names := commandNames(c.Command.Subcommands)
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if c.NArg() == 0 {
		return usagef(c, "want a command: %s", want)
	}
	return usagef(c, "unknown command %q%s: want %s", c.Args().First(), didYouMean(c.Args().First(), commandNames(c.Command.Subcommands)), want)
}

func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	return names
}

// flagNames returns the names of flags with their dashes: --session, -s.
func flagNames(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) == 1 {
				names = append(names, "-"+n)
			} else {
				names = append(names, "--"+n)
			}
		}
	}
	return names
}
