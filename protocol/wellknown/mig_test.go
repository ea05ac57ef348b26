package wellknown

import "testing"

func TestMIGResources(t *testing.T) {
	n := DefaultResourceNames()
	if got := n.MIGResource("1g.5gb"); got != "nvidia.com/mig-1g.5gb" {
		t.Errorf("MIGResource(1g.5gb) = %q", got)
	}
	for _, p := range []string{"1g.10gb+me", "", "1G.5GB", "-1g", "a/b"} {
		if got := n.MIGResource(p); got != "" {
			t.Errorf("MIGResource(%q) = %q; want none", p, got)
		}
	}
	if p, ok := n.MIGProfileOf("nvidia.com/mig-3g.20gb"); !ok || p != "3g.20gb" {
		t.Errorf("MIGProfileOf = %q, %v", p, ok)
	}
	for _, name := range []string{"nvidia.com/gpu", "example.com/mig-1g.5gb", "nvidia.com/migx"} {
		if _, ok := n.MIGProfileOf(name); ok {
			t.Errorf("MIGProfileOf(%q) says it is a MIG resource", name)
		}
	}
	n.GPU = "gpu"
	if n.MIGPrefix() != "" || n.MIGResource("1g.5gb") != "" {
		t.Errorf("a GPU resource with no domain names MIG resources %q", n.MIGPrefix())
	}
	n.GPU = "example.com/vgpu"
	if got := n.MIGResource("2g.10gb"); got != "example.com/mig-2g.10gb" {
		t.Errorf("another domain: %q", got)
	}
}

func TestIsMIGResource(t *testing.T) {
	n := DefaultResourceNames()
	for name, want := range map[string]bool{"nvidia.com/mig-1g.5gb": true, "nvidia.com/mig-": true, "nvidia.com/gpu": false, "nvidia.comx/mig-1g": false, "example.com/mig-1g.5gb": false} {
		if got := n.IsMIGResource(name); got != want {
			t.Errorf("IsMIGResource(%q) = %v", name, got)
		}
	}
}
