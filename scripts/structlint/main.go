// Command structlint checks the rules of vgpud's structure that the
// compiler and go vet do not (make lint runs it on the tree):
//
//   - the role wall: the node role's code (node/, kubeletapi/) and the
//     cluster role's (cluster/, webhook/) never import each other, tests
//     included and through any package in between, and the shared
//     packages (protocol/, internal/) import neither;
//   - settings live in their parts: a command-line flag is declared in a
//     part's package (under an internal/ directory, or webhook/), never
//     in a role's package or the root;
//   - names explain themselves: no exported type name is defined in two
//     packages, but for the few in allowedRepeats;
//   - unit tests do not sleep: no time.Sleep in a test file that the
//     plain go test builds, unless the file says why its waits are a
//     real process's (a //vgpud:wallclock line).
//
// Usage: structlint [DIR], DIR the module's root (default ".").
package main

import (
	"fmt"
	"os"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	findings, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "structlint:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Fprintln(os.Stderr, f)
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
}

// check runs every check on the module at root.
func check(root string) ([]string, error) {
	m, err := load(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range []func(*module) []string{roleWall, flagsInParts, repeatedNames, unitTestSleeps} {
		out = append(out, c(m)...)
	}
	return out, nil
}
