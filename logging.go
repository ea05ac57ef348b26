package main

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/lmittmann/tint"
	"k8s.io/klog/v2"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// logFormats are the accepted --log-format values.
func logFormats() []string { return []string{"auto", "text", "color", "json"} }

func validateLogging(level, format string) field.ErrorList {
	var errs field.ErrorList
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, invalid(flagLogLevel, level, "want debug, info, warn or error"))
	}
	if !slices.Contains(logFormats(), format) {
		errs = append(errs, invalid(flagLogFormat, format, "want "+strings.Join(logFormats(), ", ")))
	}
	return errs
}

// newLogger builds the process logger: tint text (coloured on a terminal
// under "auto"), or JSON for log collectors. klog, which client-go logs
// through, is routed into the same handler.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	if errs := validateLogging(level, format); len(errs) > 0 {
		return nil, flagErrors(errs)
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
