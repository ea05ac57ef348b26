package deviceplugin

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A kubelet that deletes the plugin's socket right after taking its first
// registration (a restarting kubelet cleaning up) never reads the devices
// through it. The plugin must serve and register again at once, not wait
// out the 5 s it gives kubelet to read the devices first.
func TestRegistrationGivesWayToSocketEvents(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 16)
	kubelet := startKubelet(t, dir, lists)
	var registered atomic.Bool
	kubelet.Unfollow(func(r *pluginapi.RegisterRequest) bool {
		if registered.Swap(true) {
			return false
		}
		_ = os.Remove(filepath.Join(dir, r.Endpoint))
		return true
	})

	states := make(chan string, 16)
	start := time.Now()
	runServer(t, dir, stateRecorder(states), func(s *PluginServer) { s.retry = time.Hour })
	if got := recv(t, states); got != wellknown.PluginServing {
		t.Fatalf("the plugin says %q, want %q", got, wellknown.PluginServing)
	}
	took := time.Since(start)
	t.Logf("serving %v after start, %d registrations", took.Round(time.Millisecond), len(kubelet.Registrations))
	if took > 2*time.Second {
		t.Errorf("serving came %v after start: the plugin waited for a stream that could not come", took.Round(time.Millisecond))
	}
	select {
	case <-lists: // the plugin said serving once it had sent them
	case <-time.After(time.Second):
		t.Error("kubelet got no device list")
	}
}
