package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/protocol/inspectv1"
)

const (
	snapshotPath = "/v1/snapshot"
	injectPath   = "/v1/inject-xid"
	processPath  = "/v1/mock-process"
	plugPath     = "/v1/mock-plug"
)

// MockControl is what a mock or fake GPU backend lets the socket change; nil
// on real hardware.
type MockControl interface {
	// InjectXIDByName delivers a fake XID to a GPU (UUID or index).
	InjectXIDByName(gpu string, xid uint64) error
	// SetProcess declares a process's use of a GPU (usedMiB 0 removes it).
	SetProcess(gpu string, pid int, usedMiB uint64, smPercent int) error
	// SetPlugged takes a GPU off the machine or puts it back.
	SetPlugged(gpu string, plugged bool) error
}

// Serve answers snapshots on the unix socket path until ctx ends, and,
// when mock is set, XID injections and process declarations. The socket
// is owner-only: it shows which pods hold which GPUs.
func Serve(ctx context.Context, path string, snapshot func() inspectv1.NodeSnapshot, mock MockControl, log *slog.Logger) error {
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
	mux.HandleFunc("POST "+injectPath, func(w http.ResponseWriter, r *http.Request) {
		if mock == nil {
			http.Error(w, "XID injection needs a mock or fake GPU backend", http.StatusNotImplemented)
			return
		}
		xid, err := strconv.ParseUint(r.URL.Query().Get("xid"), 10, 64)
		if err != nil {
			http.Error(w, "xid: want a number", http.StatusBadRequest)
			return
		}
		if err := mock.InjectXIDByName(r.URL.Query().Get("gpu"), xid); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Warn("XID injected by vgpud inspect", "gpu", r.URL.Query().Get("gpu"), "xid", xid)
	})
	mux.HandleFunc("POST "+processPath, func(w http.ResponseWriter, r *http.Request) {
		if mock == nil {
			http.Error(w, "declaring processes needs a mock or fake GPU backend; on real GPUs the driver lists them", http.StatusNotImplemented)
			return
		}
		q := r.URL.Query()
		pid, err1 := strconv.Atoi(q.Get("pid"))
		used, err2 := strconv.ParseUint(q.Get("usedMiB"), 10, 64)
		sm, err3 := strconv.Atoi(q.Get("sm"))
		if err := errors.Join(err1, err2, err3); err != nil {
			http.Error(w, "pid, usedMiB, sm: want numbers", http.StatusBadRequest)
			return
		}
		if err := mock.SetProcess(q.Get("gpu"), pid, used, sm); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Warn("mock GPU process declared by vgpud inspect", "gpu", q.Get("gpu"), "pid", pid, "used_mib", used, "sm_percent", sm)
	})
	mux.HandleFunc("POST "+plugPath, func(w http.ResponseWriter, r *http.Request) {
		if mock == nil {
			http.Error(w, "unplugging GPUs needs a mock or fake GPU backend", http.StatusNotImplemented)
			return
		}
		q := r.URL.Query()
		plugged, err := strconv.ParseBool(q.Get("plugged"))
		if err != nil {
			http.Error(w, "plugged: want true or false", http.StatusBadRequest)
			return
		}
		if err := mock.SetPlugged(q.Get("gpu"), plugged); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Warn("mock GPU plugged or unplugged by vgpud inspect", "gpu", q.Get("gpu"), "plugged", plugged)
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
func Fetch(ctx context.Context, path string) (inspectv1.NodeSnapshot, error) {
	resp, err := call(ctx, path, http.MethodGet, snapshotPath)
	if err != nil {
		return inspectv1.NodeSnapshot{}, err
	}
	defer resp.Body.Close()
	var s inspectv1.NodeSnapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return inspectv1.NodeSnapshot{}, fmt.Errorf("read snapshot from %s: %w", path, err)
	}
	return s, nil
}

// InjectXID asks the daemon on path to deliver xid to a mock GPU (UUID or index).
func InjectXID(ctx context.Context, path, gpu string, xid uint64) error {
	resp, err := call(ctx, path, http.MethodPost, injectPath+"?"+url.Values{"gpu": {gpu}, "xid": {strconv.FormatUint(xid, 10)}}.Encode())
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// SetProcess asks the daemon on path to declare a process on a mock GPU.
func SetProcess(ctx context.Context, path, gpu string, pid int, usedMiB uint64, smPercent int) error {
	q := url.Values{"gpu": {gpu}, "pid": {strconv.Itoa(pid)}, "usedMiB": {strconv.FormatUint(usedMiB, 10)}, "sm": {strconv.Itoa(smPercent)}}
	resp, err := call(ctx, path, http.MethodPost, processPath+"?"+q.Encode())
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// SetPlugged asks the daemon on path to take a mock GPU off its machine,
// or put it back.
func SetPlugged(ctx context.Context, path, gpu string, plugged bool) error {
	resp, err := call(ctx, path, http.MethodPost, plugPath+"?"+url.Values{"gpu": {gpu}, "plugged": {strconv.FormatBool(plugged)}}.Encode())
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func call(ctx context.Context, path, method, target string) (*http.Response, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no vgpud daemon on this node: %s does not exist (is the vgpud DaemonSet pod running here? from outside it: kubectl -n vgpud-system exec ds/vgpud -- vgpud inspect, with your namespace and, where the chart's fullnameOverride is set, that name)", path)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, method, "http://vgpud"+target, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no vgpud daemon answers on %s (a stale socket?): %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("vgpud daemon on %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return resp, nil
}
