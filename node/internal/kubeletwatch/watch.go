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

// Watch reports events for dir until ctx ends; errors of the watcher
// itself end it, since a blind plugin would never re-register.
func Watch(ctx context.Context, dir, pluginSocket string, out chan<- Event) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	kubelet := filepath.Join(dir, "kubelet.sock")
	own := filepath.Join(dir, pluginSocket)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			return fmt.Errorf("watch %s: %w", dir, err)
		case ev := <-w.Events:
			var e Event
			switch {
			case ev.Name == kubelet && ev.Has(fsnotify.Create):
				e = KubeletRestarted
			case ev.Name == own && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
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
