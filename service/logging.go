package service

import (
	"io"
	"log/slog"
	"os"
)

// NewLogger returns the agent's logger: JSON under a service manager (or
// when asked), text on a terminal, so journald and log shippers get one
// parseable record per event while a person reading a terminal gets lines.
func NewLogger(w io.Writer, c LogConfig) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level.Level()}
	format := c.Format
	if format == "" || format == LogAuto {
		format = LogJSON
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			format = LogText
		}
	}
	if format == LogText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
