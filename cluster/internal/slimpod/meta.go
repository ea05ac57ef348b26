package slimpod

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Meta is the part of a pod's metadata the leader reads: 80 bytes where
// metav1.ObjectMeta takes 248, for each of tens of thousands of pods. It
// is a metav1.Object, so that client-go's stores and indexes can key a
// record; the fields it does not keep read as empty and their setters do
// nothing.
type Meta struct {
	Name              string
	Namespace         string
	UID               types.UID
	ResourceVersion   string
	DeletionTimestamp *metav1.Time
	// Annotations holds only the annotations the leader reads
	// (leaderAnnotations).
	Annotations map[string]string
}

var _ metav1.Object = (*Meta)(nil)

func (m *Meta) GetNamespace() string                { return m.Namespace }
func (m *Meta) SetNamespace(namespace string)       { m.Namespace = namespace }
func (m *Meta) GetName() string                     { return m.Name }
func (m *Meta) SetName(name string)                 { m.Name = name }
func (m *Meta) GetUID() types.UID                   { return m.UID }
func (m *Meta) SetUID(uid types.UID)                { m.UID = uid }
func (m *Meta) GetResourceVersion() string          { return m.ResourceVersion }
func (m *Meta) SetResourceVersion(version string)   { m.ResourceVersion = version }
func (m *Meta) GetDeletionTimestamp() *metav1.Time  { return m.DeletionTimestamp }
func (m *Meta) SetDeletionTimestamp(t *metav1.Time) { m.DeletionTimestamp = t }
func (m *Meta) GetAnnotations() map[string]string   { return m.Annotations }
func (m *Meta) SetAnnotations(a map[string]string)  { m.Annotations = a }

// What a record does not keep.

func (m *Meta) GetGenerateName() string                       { return "" }
func (m *Meta) SetGenerateName(string)                        {}
func (m *Meta) GetGeneration() int64                          { return 0 }
func (m *Meta) SetGeneration(int64)                           {}
func (m *Meta) GetSelfLink() string                           { return "" }
func (m *Meta) SetSelfLink(string)                            {}
func (m *Meta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (m *Meta) SetCreationTimestamp(metav1.Time)              {}
func (m *Meta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (m *Meta) SetDeletionGracePeriodSeconds(*int64)          {}
func (m *Meta) GetLabels() map[string]string                  { return nil }
func (m *Meta) SetLabels(map[string]string)                   {}
func (m *Meta) GetFinalizers() []string                       { return nil }
func (m *Meta) SetFinalizers([]string)                        {}
func (m *Meta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (m *Meta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (m *Meta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (m *Meta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// deepCopyInto copies m into out, the annotations and the deletion
// timestamp too.
func (m *Meta) deepCopyInto(out *Meta) {
	*out = *m
	if m.DeletionTimestamp != nil {
		out.DeletionTimestamp = m.DeletionTimestamp.DeepCopy()
	}
	if m.Annotations != nil {
		out.Annotations = make(map[string]string, len(m.Annotations))
		for k, v := range m.Annotations {
			out.Annotations[k] = v
		}
	}
}
