package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

const snapshotPath = "/v1/snapshot"

// Serve answers snapshots on the unix socket path until ctx ends. The
// socket is owner-only: it shows which pods hold which GPUs.
func Serve(ctx context.Context, path string, snapshot func() Snapshot, log *slog.Logger) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("inspect socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("inspect socket: remove stale %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("inspect socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("inspect socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+snapshotPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(snapshot()); err != nil {
			log.Warn("write inspect snapshot", "err", err)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Info("inspect socket listening", "path", path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("inspect socket: %w", err)
	}
	return nil
}

// Fetch reads a snapshot from the daemon on path.
func Fetch(ctx context.Context, path string) (Snapshot, error) {
	if _, err := os.Stat(path); err != nil {
		return Snapshot{}, fmt.Errorf("no vgpud daemon on this node: %s does not exist (is the vgpud DaemonSet pod running here? from outside it: kubectl -n vgpud-system exec ds/vgpud -- vgpud inspect)", path)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vgpud"+snapshotPath, nil)
	if err != nil {
		return Snapshot{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Snapshot{}, fmt.Errorf("no vgpud daemon answers on %s (a stale socket?): %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Snapshot{}, fmt.Errorf("vgpud daemon on %s answered %s", path, resp.Status)
	}
	var s Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Snapshot{}, fmt.Errorf("read snapshot from %s: %w", path, err)
	}
	return s, nil
}
