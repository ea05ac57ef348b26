package main

import "path/filepath"

// kubectlPlugin is the name under which kubectl runs vgpud as `kubectl
// vgpud` (the binary, or a link to it, on PATH).
const kubectlPlugin = "kubectl-vgpud"

// asKubectlPlugin turns `kubectl vgpud ARGS` into `vgpud inspect
// --cluster ARGS`: kubectl runs the plugin with the arguments after its
// name and its own environment (KUBECONFIG included).
func asKubectlPlugin(args []string) []string {
	if len(args) == 0 || filepath.Base(args[0]) != kubectlPlugin {
		return args
	}
	return append([]string{args[0], "inspect", "--cluster"}, args[1:]...)
}
