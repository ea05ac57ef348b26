package manifests

import (
	"net"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/internal/metricsserver"
)

// The DaemonSet's readiness probe asks the daemon's /readyz where the
// daemon's default flags serve it: HTTPS, the metrics port.
func TestReadinessProbeIsWhereTheDaemonServesIt(t *testing.T) {
	doc, err := Document("DaemonSet")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet == nil || p.Exec != nil {
		t.Fatalf("container %s's readiness probe %+v: want an HTTP GET, not an exec", c.Name, p)
	}
	if p.HTTPGet.Path != "/readyz" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("probe %s %s, want HTTPS /readyz", p.HTTPGet.Scheme, p.HTTPGet.Path)
	}
	opts := metricsserver.DefaultOptions()
	if why := opts.ProbeMismatch(); why != "" {
		t.Fatalf("the default metrics options fail the probe: %s", why)
	}
	_, port, err := net.SplitHostPort(opts.MetricsListen)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range c.Ports {
		if cp.Name == p.HTTPGet.Port.String() {
			if strconv.Itoa(int(cp.ContainerPort)) != port {
				t.Errorf("the probe's port %s is %d; the daemon listens on %s", cp.Name, cp.ContainerPort, opts.MetricsListen)
			}
			return
		}
	}
	t.Errorf("the probe's port %q is not one of the container's", p.HTTPGet.Port.String())
}
