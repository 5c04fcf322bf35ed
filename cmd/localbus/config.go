package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "print the configuration file with every key and its default",
		Subcommands: []*cli.Command{{
			Name:  "defaults",
			Usage: "print a configuration file listing every key commented out with its default",
			Description: "The output is a valid configuration file that changes nothing; uncomment a line\n" +
				"to change a key. A default that depends on who runs the daemon is stated in words.\n" +
				"--set KEY=VALUE writes that key set, with the value as its serve flag takes it:\n" +
				"  localbus config defaults --set keys_file=/var/lib/localbus/keys.json > config.toml",
			Flags: []cli.Flag{&cli.StringSliceFlag{Name: "set", Usage: "write KEY set to VALUE instead of commented out (repeatable)"}},
			Action: func(c *cli.Context) error {
				if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
					return err
				}
				set := map[string]string{}
				for _, kv := range c.StringSlice("set") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return usagef(c, "--set %q: want KEY=VALUE", kv)
					}
					set[k] = v
				}
				b, err := daemon.DefaultsFile(set)
				if err != nil {
					return usagef(c, "--set: %v", err)
				}
				_, err = c.App.Writer.Write(b)
				return err
			},
		}},
	}
}
