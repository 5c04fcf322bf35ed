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
// --socket also reads $LOCALBUS_SOCKET, the variable the CLI's clients use.
//
// Flags keep state, so each call returns new ones: use one slice per
// command. ConfigFromCLI reads them back.
func ServeFlags() []cli.Flag {
	def := Defaults()
	flags := []cli.Flag{ConfigFlag()}
	for _, s := range settings {
		var envs []string
		if s.env != "" {
			envs = []string{s.env}
		}
		name, text := flagName(s.key), defaultText(s.field(&def))
		switch s.field(&def).(type) {
		case *bool:
			flags = append(flags, &cli.BoolFlag{Name: name, Usage: s.usage, EnvVars: envs, DefaultText: text})
		case *[]string:
			flags = append(flags, &cli.StringSliceFlag{Name: name, Usage: s.usage, EnvVars: envs, DefaultText: text})
		default:
			flags = append(flags, &cli.StringFlag{Name: name, Usage: s.usage, EnvVars: envs, DefaultText: text, TakesFile: s.path})
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
// every flag the user set on the command line or through its environment
// variable, which wins over the file. Flag values are parsed and validated
// like file values; errors are *ConfigError values naming the flag.
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
		if !c.IsSet(name) {
			continue
		}
		flag := "--" + name
		switch p := s.field(&l.cfg).(type) {
		case *bool:
			*p = c.Bool(name)
		case *[]string:
			*p = nilIfEmpty(c.StringSlice(name))
		default:
			if msg := setString(p, c.String(name)); msg != "" {
				l.errs = append(l.errs, &ConfigError{Key: s.key, Msg: msg, Flag: flag})
				continue
			}
		}
		l.from[s.key] = valueOrigin{flag: flag}
	}
	return l.finish()
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
