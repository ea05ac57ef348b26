// Package manifests holds the install manifest, embedded so that tests
// check and apply the very file users apply.
package manifests

import (
	_ "embed"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

//go:embed vgpud.yaml
var install string

// NodeRevert is manifests/node-revert.yaml, removal's first step: every
// node's runtime set back.
//
//go:embed node-revert.yaml
var NodeRevert string

// TenantExample is manifests/tenant-example.yaml, a tenant namespace as
// docs/security-tenants.md asks for it.
//
//go:embed tenant-example.yaml
var TenantExample string

// Document returns the first document of vgpud.yaml of the given kind.
func Document(kind string) (string, error) {
	for _, doc := range strings.Split(install, "\n---\n") {
		if strings.Contains(doc, "\nkind: "+kind+"\n") {
			return doc, nil
		}
	}
	return "", fmt.Errorf("manifests/vgpud.yaml has no %s", kind)
}

// Named returns the document of vgpud.yaml of the given kind and name.
func Named(kind, name string) (string, error) {
	for _, doc := range strings.Split(install, "\n---\n") {
		if strings.Contains(doc, "\nkind: "+kind+"\n") && strings.Contains(doc, "\nmetadata:\n  name: "+name+"\n") {
			return doc, nil
		}
	}
	return "", fmt.Errorf("manifests/vgpud.yaml has no %s %s", kind, name)
}

// WebhookConfiguration decodes the manifest's MutatingWebhookConfiguration,
// rejecting fields the API does not know.
func WebhookConfiguration() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	doc, err := Document("MutatingWebhookConfiguration")
	if err != nil {
		return nil, err
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict([]byte(doc), &mwc); err != nil {
		return nil, fmt.Errorf("manifests/vgpud.yaml: %w", err)
	}
	return &mwc, nil
}

// TenantLabels are the labels of TenantExample's Namespace: Pod Security
// enforcement, which tenant namespaces need (tests make theirs with them).
func TenantLabels() (map[string]string, error) {
	doc, _, _ := strings.Cut(TenantExample, "\n---\n")
	var ns struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &ns); err != nil || ns.Kind != "Namespace" {
		return nil, fmt.Errorf("manifests/tenant-example.yaml: want a Namespace first (%v)", err)
	}
	return ns.Metadata.Labels, nil
}

// GPUPodsPolicy decodes the manifest's MutatingAdmissionPolicy, which
// makes a GPU pod placeable in the apiserver itself, and its binding.
func GPUPodsPolicy() (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
	var p admissionregistrationv1.MutatingAdmissionPolicy
	var b admissionregistrationv1.MutatingAdmissionPolicyBinding
	for kind, into := range map[string]any{"MutatingAdmissionPolicy": &p, "MutatingAdmissionPolicyBinding": &b} {
		doc, err := Document(kind)
		if err != nil {
			return nil, nil, err
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			return nil, nil, fmt.Errorf("manifests/vgpud.yaml %s: %w", kind, err)
		}
	}
	return &p, &b, nil
}
