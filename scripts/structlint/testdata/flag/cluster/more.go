package cluster

import "github.com/urfave/cli/v2"

func more() cli.Flag { return new(cli.StringFlag) }
