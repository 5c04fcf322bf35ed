package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon"
)

// serveFlags returns the flags of localbus serve: configFlag and one flag
// per entry of daemon.Settings, named like the key with '-' for '_'
// (ring_size is --ring-size). Values are written as in the file: durations
// "15s", modes "0660", sizes in bytes; list flags repeat or take a
// comma-separated list. A setting with an environment variable names it in
// its usage; serveSource reads it.
//
// Flags keep state, so each call returns new ones: use one slice per
// command.
func serveFlags() []cli.Flag {
	flags := []cli.Flag{configFlag()}
	for _, s := range daemon.Settings() {
		// The environment variable is read by serveSource, not by the
		// flag: urfave/cli counts an empty variable as set.
		usage := s.Usage
		if s.Env != "" {
			usage += " [$" + s.Env + "]"
		}
		name, text := s.Flag(), s.Default()
		switch s.Kind() {
		case daemon.KindBool:
			flags = append(flags, &cli.BoolFlag{Name: name, Usage: usage, DefaultText: text})
		case daemon.KindList:
			flags = append(flags, &cli.StringSliceFlag{Name: name, Usage: usage, DefaultText: text})
		default:
			flags = append(flags, &cli.StringFlag{Name: name, Usage: usage, DefaultText: text, TakesFile: s.Path})
		}
	}
	return flags
}

// configFlag returns the --config flag: the configuration file, by default
// daemon.DefaultConfigPath(). Commands other than serve that read the
// configuration (keys add, for the keys file) use it with configSource.
func configFlag() cli.Flag {
	return &cli.StringFlag{
		Name:        "config",
		Usage:       "configuration file (TOML); an absent default file means all defaults",
		DefaultText: daemon.DefaultConfigPath(),
		TakesFile:   true,
	}
}

// configSource returns the configuration file of a command that has
// configFlag, with nothing set over it.
func configSource(c *cli.Context) daemon.Source {
	return daemon.Source{File: c.String("config"), FileExplicit: c.IsSet("config")}
}

// serveSource returns the configuration source of a command that has
// serveFlags: the file named by --config (or the default file), every flag
// the user set, and the settings' environment variables. The daemon reads
// it at start and again on every reload.
func serveSource(c *cli.Context) daemon.Source {
	src := configSource(c)
	src.Set = make(map[string]string)
	src.Env = make(map[string]string)
	for _, s := range daemon.Settings() {
		if s.Env != "" {
			if v, ok := os.LookupEnv(s.Env); ok {
				src.Env[s.Env] = v
			}
		}
		name := s.Flag()
		if !c.IsSet(name) {
			continue
		}
		switch s.Kind() {
		case daemon.KindBool:
			src.Set[s.Key] = strconv.FormatBool(c.Bool(name))
		case daemon.KindList:
			src.Set[s.Key] = strings.Join(c.StringSlice(name), ",")
		default:
			src.Set[s.Key] = c.String(name)
		}
	}
	return src
}
