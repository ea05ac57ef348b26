package main

import (
	"reflect"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagGroup is the flags of `vgpud run` that set one part's settings.
type flagGroup struct {
	name  string // as docs/settings.md titles it
	flags []cli.Flag
}

// flagGroups are every flag of `vgpud run`, by the part whose settings
// they set, each also read from its environment variable (withEnv);
// docs/settings.md's tables are these (settings_test.go).
func flagGroups(cfg *config) []flagGroup {
	groups := []flagGroup{
		{"both roles", slices.Concat(cfg.Logging.Flags(), cfg.Kube.Flags(), cfg.Process.Flags(), cfg.Metrics.Flags())},
		{"node role", cfg.Node.Flags()},
		{"cluster role", cfg.Cluster.Flags()},
		{"webhook", cfg.Webhook.Flags()},
	}
	for _, g := range groups {
		withEnv(g.flags)
	}
	return groups
}

// withEnv lets the environment set each flag that names no variable of
// its own: VGPUD_ plus the flag's name in upper snake case. The rule is
// the binary's, so the parts' flags carry none.
func withEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		env := reflect.ValueOf(f).Elem().FieldByName("EnvVars")
		if env.IsValid() && env.Len() == 0 {
			env.Set(reflect.ValueOf(envVar(f.Names()[0])))
		}
	}
	return flags
}

// envVar is the environment variable that also sets a flag.
func envVar(flag string) []string {
	return []string{"VGPUD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}
