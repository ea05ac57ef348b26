package webhook

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate reports every webhook setting that cannot work, by its flag.
func (c Config) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, value any, allowed string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), value, allowed))
	}
	if c.CorePolicy != "" && !slices.Contains(CorePolicies(), c.CorePolicy) {
		add(flagCorePolicy, c.CorePolicy, "want "+strings.Join(CorePolicies(), ", ")+" or empty")
	}
	if c.RuntimeClass != "" && len(validation.IsDNS1123Subdomain(c.RuntimeClass)) > 0 {
		add(flagRuntimeClass, c.RuntimeClass, "want a RuntimeClass name such as nvidia")
	}
	for _, ns := range c.HookOptionalNamespaces {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			add(flagHookOptional, strings.Join(c.HookOptionalNamespaces, ","), ns+" is not a namespace name")
			break
		}
	}
	return errs
}
