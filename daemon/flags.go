package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// ServeFlags returns the flags of localbus serve: ConfigFlag and one flag per
// configuration key, named like the key with '-' for '_' (ring_size is
// --ring-size). Values are written as in the file: durations "15s", modes
// "0660", sizes in bytes; list flags repeat or take a comma-separated list.
// Without --socket, a non-empty $LOCALBUS_SOCKET (the variable the CLI's
// clients read) sets the socket over the file.
//
// Flags keep state, so each call returns new ones: use one slice per
// command. ConfigFromCLI reads them back.
func ServeFlags() []cli.Flag {
	def := Defaults()
	flags := []cli.Flag{ConfigFlag()}
	for _, s := range settings {
		// The environment variable is read by ConfigFromCLI, not by the
		// flag: urfave/cli counts an empty variable as set.
		usage := s.usage
		if s.env != "" {
			usage += " [$" + s.env + "]"
		}
		name, text := flagName(s.key), defaultText(s.field(&def))
		switch s.field(&def).(type) {
		case *bool:
			flags = append(flags, &cli.BoolFlag{Name: name, Usage: usage, DefaultText: text})
		case *[]string:
			flags = append(flags, &cli.StringSliceFlag{Name: name, Usage: usage, DefaultText: text})
		default:
			flags = append(flags, &cli.StringFlag{Name: name, Usage: usage, DefaultText: text, TakesFile: s.path})
		}
	}
	return flags
}

// ConfigFlag returns the --config flag: the configuration file, by default
// DefaultConfigPath(). Commands other than serve that read the configuration
// (keys add, for the keys file) use it with LoadConfig(c.String("config"),
// c.IsSet("config")).
func ConfigFlag() cli.Flag {
	return &cli.StringFlag{
		Name:        "config",
		Usage:       "configuration file (TOML); an absent default file means all defaults",
		DefaultText: DefaultConfigPath(),
		TakesFile:   true,
	}
}

// ConfigFromCLI returns the configuration of a command that has ServeFlags:
// the file named by --config (or the default file, see LoadConfig), then
// every flag the user set, which wins over the file (and, for --socket, a
// non-empty $LOCALBUS_SOCKET, which wins over the file but not over the
// flag). Flag values are parsed and validated like file values; their errors
// are *ConfigError values whose Flag names the flag or variable.
//
// It reads the file afresh on every call, so reload calls it again with the
// same context to re-read the file under the same flags.
func ConfigFromCLI(c *cli.Context) (Config, error) {
	l, err := loadFile(c.String("config"), c.IsSet("config"))
	if err != nil {
		return Config{}, err
	}
	for _, s := range settings {
		name := flagName(s.key)
		switch {
		case c.IsSet(name):
			l.applyFlag(s, c, name)
		case s.env != "" && os.Getenv(s.env) != "":
			l.applyString(s, os.Getenv(s.env), "$"+s.env)
		}
	}
	return l.finish()
}

// applyFlag sets the value of s from its flag, name.
func (l *loader) applyFlag(s setting, c *cli.Context, name string) {
	switch p := s.field(&l.cfg).(type) {
	case *bool:
		*p = c.Bool(name)
	case *[]string:
		*p = nilIfEmpty(c.StringSlice(name))
	default:
		l.applyString(s, c.String(name), "--"+name)
		return
	}
	l.from[s.key] = valueOrigin{flag: "--" + name}
}

// applyString sets the value of s from v, which came from flag (a flag or
// an environment variable).
func (l *loader) applyString(s setting, v, flag string) {
	if msg := setString(s.field(&l.cfg), v); msg != "" {
		l.errs = append(l.errs, &ConfigError{Key: s.key, Msg: msg, Flag: flag})
		return
	}
	l.from[s.key] = valueOrigin{flag: flag}
}

// flagName returns the flag of a configuration key: ring_size is ring-size.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// defaultText formats the default a field points to for flag help, as the
// flag would take it.
func defaultText(ptr any) string {
	switch p := ptr.(type) {
	case *string:
		return *p
	case *bool:
		return strconv.FormatBool(*p)
	case *[]string:
		return strings.Join(*p, ",")
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *time.Duration:
		return p.String()
	case *os.FileMode:
		return fmt.Sprintf("%04o", uint32(*p))
	}
	panic(fmt.Sprintf("daemon: no default text for %T", ptr))
}
