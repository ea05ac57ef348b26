// Package kubeletwatch tells the device plugin when kubelet restarted (its
// kubelet.sock was created again) or our own socket was removed, which
// kubelet does when it restarts: both mean serve again and re-register.
package kubeletwatch

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// Event is why the plugin must restart.
type Event string

const (
	KubeletRestarted Event = "kubelet.sock created"
	SocketRemoved    Event = "plugin socket removed"
)

// RestartWatcher watches kubelet's device-plugin directory.
type RestartWatcher struct {
	fs      *fsnotify.Watcher
	dir     string
	kubelet string          // kubelet's socket
	own     map[string]bool // the plugin's sockets
}

// New starts watching dir, in which the plugin serves pluginSockets: an
// event from when New returns on is reported by Run.
func New(dir string, pluginSockets ...string) (*RestartWatcher, error) {
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	if err := fs.Add(dir); err != nil {
		_ = fs.Close()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	own := make(map[string]bool, len(pluginSockets))
	for _, s := range pluginSockets {
		own[filepath.Join(dir, s)] = true
	}
	return &RestartWatcher{fs: fs, dir: dir, kubelet: filepath.Join(dir, "kubelet.sock"), own: own}, nil
}

// Run reports events until ctx ends, then stops watching; errors of the
// watcher itself end it, since a blind plugin would never re-register.
func (w *RestartWatcher) Run(ctx context.Context, out chan<- Event) error {
	defer w.fs.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.fs.Errors:
			return fmt.Errorf("watch %s: %w", w.dir, err)
		case ev := <-w.fs.Events:
			var e Event
			switch {
			case ev.Name == w.kubelet && ev.Has(fsnotify.Create):
				e = KubeletRestarted
			case w.own[ev.Name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				e = SocketRemoved
			default:
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
