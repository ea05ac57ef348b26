package manifests

import _ "embed"

// ContainerdDropIn is manifests/node-setup/containerd-vgpud.toml, the
// node setup for containerd that `vgpud node-setup` installs.
//
//go:embed node-setup/containerd-vgpud.toml
var ContainerdDropIn string

// CRIODropIn is manifests/node-setup/crio-vgpud.conf, the node setup for
// CRI-O that `vgpud node-setup` installs.
//
//go:embed node-setup/crio-vgpud.conf
var CRIODropIn string
