package kubeclient

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// Serves asks discovery, each time it is called, whether the apiserver
// serves groupVersion: false where it answers that it does not, an error
// where it cannot tell.
func Serves(d discovery.ServerResourcesInterface, groupVersion string) func() (bool, error) {
	return func() (bool, error) {
		_, err := d.ServerResourcesForGroupVersion(groupVersion)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		default:
			return false, err
		}
	}
}
