// Package logging is the process's logger: its settings, and the handler
// klog (client-go's logger) shares with it.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/lmittmann/tint"
	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// The flags of Options.
const (
	FlagLogLevel  = "log-level"
	FlagLogFormat = "log-format"
)

// Formats are the accepted --log-format values.
func Formats() []string { return []string{"auto", "text", "color", "json"} }

// Options are how the process logs.
type Options struct {
	LogLevel  string
	LogFormat string
}

// DefaultOptions log info and above, coloured on a terminal.
func DefaultOptions() Options { return Options{LogLevel: "info", LogFormat: "auto"} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagLogLevel, Usage: "debug, info, warn or error", Value: o.LogLevel, Destination: &o.LogLevel},
		&cli.StringFlag{Name: FlagLogFormat, Usage: strings.Join(Formats(), ", ") + " (auto: colour on a terminal)", Value: o.LogFormat, Destination: &o.LogFormat},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	var l slog.Level
	if err := l.UnmarshalText([]byte(o.LogLevel)); err != nil {
		errs = append(errs, field.Invalid(field.NewPath(FlagLogLevel), o.LogLevel, "want debug, info, warn or error"))
	}
	if !slices.Contains(Formats(), o.LogFormat) {
		errs = append(errs, field.Invalid(field.NewPath(FlagLogFormat), o.LogFormat, "want "+strings.Join(Formats(), ", ")))
	}
	return errs
}

// New builds the process logger on w: tint text (coloured on a terminal
// under "auto"), or JSON for log collectors. klog, which client-go logs
// through, is routed into the same handler.
func New(w io.Writer, o Options) (*slog.Logger, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("logging: %w", errors.Join(errs.ToAggregate().Errors()...))
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(o.LogLevel))
	var h slog.Handler
	switch o.LogFormat {
	case "json":
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})
	default:
		colour := o.LogFormat == "color" || (o.LogFormat == "auto" && isTerminal(w))
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
