package webhook

import (
	"fmt"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// podPatch is the JSON patch from original to mutated, the pod's metadata
// and spec under root ("" for a pod, "/spec/template" for a Job's pod
// template), given that Decide
// changes only NRI's required-plugins annotation, the scheduler, the
// RuntimeClass, the resource claims (claims.go), and containers'
// resources and env (replacing an env entry in place or appending). It is built
// from those fields alone, in time linear in the pod: a generic JSON diff
// of a pod with 90 000 env entries cost the leader 21 s of CPU.
func podPatch(root string, original, mutated *corev1.Pod) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	add := func(path string, v any) { ops = append(ops, jsonpatch.NewOperation("add", root+path, v)) }
	if v, ok := mutated.Annotations[wellknown.AnnotationRequiredPlugins]; ok && original.Annotations[wellknown.AnnotationRequiredPlugins] != v {
		switch {
		case apiequality.Semantic.DeepEqual(original.ObjectMeta, metav1.ObjectMeta{}):
			// No metadata member to add to (the apiserver always sends
			// one, with a name; a fuzzed review may not).
			add("/metadata", map[string]any{"annotations": map[string]string{wellknown.AnnotationRequiredPlugins: v}})
		case original.Annotations == nil:
			add("/metadata/annotations", map[string]string{wellknown.AnnotationRequiredPlugins: v})
		default:
			add("/metadata/annotations/"+wellknown.AnnotationRequiredPlugins, v)
		}
	}
	if original.Spec.SchedulerName != mutated.Spec.SchedulerName {
		add("/spec/schedulerName", mutated.Spec.SchedulerName)
	}
	if !apiequality.Semantic.DeepEqual(original.Spec.ResourceClaims, mutated.Spec.ResourceClaims) {
		add("/spec/resourceClaims", mutated.Spec.ResourceClaims)
	}
	if rc := mutated.Spec.RuntimeClassName; rc != nil && (original.Spec.RuntimeClassName == nil || *original.Spec.RuntimeClassName != *rc) {
		add("/spec/runtimeClassName", *rc)
	}
	lists := []struct {
		path          string
		before, after []corev1.Container
	}{
		{"/spec/initContainers", original.Spec.InitContainers, mutated.Spec.InitContainers},
		{"/spec/containers", original.Spec.Containers, mutated.Spec.Containers},
	}
	for _, l := range lists {
		for i := range l.after {
			ops = containerPatch(ops, root+l.path+"/"+strconv.Itoa(i), &l.before[i], &l.after[i])
		}
	}
	return ops
}

// containerPatch appends the ops that turn before's resources and env
// into after's.
func containerPatch(ops []jsonpatch.Operation, path string, before, after *corev1.Container) []jsonpatch.Operation {
	add := func(p string, v any) { ops = append(ops, jsonpatch.NewOperation("add", p, v)) }
	b, a := &before.Resources, &after.Resources
	switch {
	case b.Limits == nil && b.Requests == nil && b.Claims == nil && (a.Limits != nil || a.Requests != nil):
		// The object may have no resources member at all.
		add(path+"/resources", a)
	default:
		if !apiequality.Semantic.DeepEqual(b.Limits, a.Limits) {
			add(path+"/resources/limits", a.Limits)
		}
		if !apiequality.Semantic.DeepEqual(b.Requests, a.Requests) {
			add(path+"/resources/requests", a.Requests)
		}
		if !apiequality.Semantic.DeepEqual(b.Claims, a.Claims) {
			add(path+"/resources/claims", a.Claims)
		}
	}
	switch {
	case len(after.Env) == len(before.Env) && len(before.Env) == 0:
	case len(before.Env) == 0:
		add(path+"/env", after.Env)
	default:
		for j := range after.Env {
			switch {
			case j >= len(before.Env):
				add(path+"/env/-", after.Env[j])
			case !apiequality.Semantic.DeepEqual(before.Env[j], after.Env[j]):
				ops = append(ops, jsonpatch.NewOperation("replace", fmt.Sprintf("%s/env/%d", path, j), after.Env[j]))
			}
		}
	}
	return ops
}
