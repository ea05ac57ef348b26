package configapi

import "k8s.io/apimachinery/pkg/util/validation/field"

// InFileTerms names each finding of a Validate that reports by flag by
// the file's key instead, where a setting of settings has that flag, so
// that an error names what the file says.
func InFileTerms(errs field.ErrorList, settings []Setting) field.ErrorList {
	keys := make(map[string]string, len(settings))
	for _, s := range settings {
		keys[s.Flag] = s.Key
	}
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		c := *e
		if k, ok := keys[c.Field]; ok {
			c.Field = k
		}
		out = append(out, &c)
	}
	return out
}
