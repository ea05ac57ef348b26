package main

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/lmittmann/tint"
	"k8s.io/klog/v2"

	"github.com/vgpud/vgpud/setting"
)

// logFormats are the accepted --log-format values.
func logFormats() []string { return []string{"auto", "text", "color", "json"} }

func validateLogging(level, format string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return setting.Invalid("log-level", level, "want debug, info, warn or error")
	}
	if !slices.Contains(logFormats(), format) {
		return setting.Invalid("log-format", format, "want "+strings.Join(logFormats(), ", "))
	}
	return nil
}

// newLogger builds the process logger: tint text (coloured on a terminal
// under "auto"), or JSON for log collectors. klog, which client-go logs
// through, is routed into the same handler.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	if err := validateLogging(level, format); err != nil {
		return nil, err
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	var h slog.Handler
	switch format {
	case "json":
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})
	default:
		colour := format == "color" || (format == "auto" && isTerminal(w))
		h = tint.NewHandler(w, &tint.Options{Level: l, NoColor: !colour, TimeFormat: "15:04:05.000"})
	}
	logger := slog.New(h)
	klog.SetSlogLogger(logger)
	return logger, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
