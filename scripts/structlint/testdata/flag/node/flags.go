package node

import "github.com/urfave/cli/v2"

func flags(c *Config) []cli.Flag { return []cli.Flag{&cli.IntFlag{Name: "split"}} }
