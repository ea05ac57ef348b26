// Package setting reports a setting that cannot work in one form for every
// part of vgpud: the flag, the value it got and what it accepts. Each
// part's Config validates itself with it; main only joins the answers.
package setting

import "fmt"

// Invalid says that --name=value cannot work and what would.
func Invalid(name string, value any, want string) error {
	if s, ok := value.(string); ok && s == "" {
		value = `""`
	}
	return fmt.Errorf("--%s=%v is invalid: %s", name, value, want)
}
