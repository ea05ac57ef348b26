package webhook

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// checkContainer reads what c asks for and says what is wrong with it.
func checkContainer(c *corev1.Container, names wellknown.ResourceNames) (podmodel.ContainerRequest, []string) {
	var problems []string
	if asked := podmodel.VGPUNames(c, names); len(asked) > 0 && privileged(c) {
		// HAMi skipped such containers, so the pod went to the default
		// scheduler and stayed Pending forever (no node has gpumem).
		problems = append(problems, fmt.Sprintf(
			"container %q is privileged and asks for %s; a privileged container sees every GPU, so vGPU limits cannot hold: drop securityContext.privileged or the vGPU resources",
			c.Name, strings.Join(asked, ", ")))
	}
	for _, n := range append(names.All(), podmodel.MIGResources(c, names)...) {
		l, okL := c.Resources.Limits[corev1.ResourceName(n)]
		r, okR := c.Resources.Requests[corev1.ResourceName(n)]
		if okL && okR && l.Cmp(r) != 0 {
			problems = append(problems, fmt.Sprintf("container %q: %s request %s differs from its limit %s; set them equal or drop the request",
				c.Name, n, r.String(), l.String()))
		}
	}
	req, err := podmodel.ContainerRequestOf(c, names)
	if err != nil {
		problems = append(problems, err.Error())
	}
	return req, problems
}

// mutateContainer applies the per-container rules to a valid, unprivileged
// container r that asks for vGPU resources.
func (p *Pods) mutateContainer(c *corev1.Container, r podmodel.ContainerRequest) {
	names := p.names
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	limits := c.Resources.Limits
	all := append(names.All(), podmodel.MIGResources(c, names)...)
	// The apiserver rejects an extended resource requested without a limit;
	// a request alone is read as the limit.
	for _, n := range all {
		if q, ok := c.Resources.Requests[corev1.ResourceName(n)]; ok {
			if _, ok := limits[corev1.ResourceName(n)]; !ok {
				limits[corev1.ResourceName(n)] = q.DeepCopy()
			}
		}
	}
	gpus := r.GPUs
	if r.MIGProfile != "" {
		// An instance of the profile, whole: no count or cores to default.
		gpus = 0
	} else if !r.HasGPUs {
		gpus = DefaultGPUCount
		limits[corev1.ResourceName(names.GPU)] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	}
	_, hasCores := limits[corev1.ResourceName(names.GPUCores)]
	_, hasMem := limits[corev1.ResourceName(names.GPUMem)]
	if gpus > 0 && !hasCores && !hasMem && (r.MemoryPercent == 0 || r.MemoryPercent == 100) {
		// A whole card: without this it would share its SMs with any
		// later pod that fits beside it.
		limits[corev1.ResourceName(names.GPUCores)] = *resource.NewQuantity(100, resource.DecimalSI)
	}
	// The task priority reaches the container from nvidia.com/priority
	// through the runtime hook or the device plugin (grant.For), not from
	// env here: CUDA_TASK_PRIORITY is a name vgpud owns, refused in a
	// pod's spec by the vgpud-slice-env policy, which runs after this.
	if p.cfg.CorePolicy != "" {
		setEnv(c, EnvCorePolicy, p.cfg.CorePolicy)
	}
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	for _, n := range all {
		if q, ok := limits[corev1.ResourceName(n)]; ok {
			c.Resources.Requests[corev1.ResourceName(n)] = q.DeepCopy()
		}
	}
}

// setEnv sets name to value, replacing an existing entry in place.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}
