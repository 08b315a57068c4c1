package service

import (
	"io"
	"log/slog"
	"os"

	"github.com/stateguard/stateguard/internal/journald"
	"github.com/stateguard/stateguard/internal/termsafe"
)

// LogOutput is where the agent's log can go. The zero value is this
// process's stderr, environment and the system journal.
type LogOutput struct {
	Stderr io.Writer           // default os.Stderr
	Getenv func(string) string // default os.Getenv (reads $JOURNAL_STREAM)
	// JournalSocket is journald's native socket ("" for the default);
	// tests point it at a fake journal.
	JournalSocket string
	// Identifier is the journal's SYSLOG_IDENTIFIER (default "agentd").
	Identifier string
}

// NewLogger returns the agent's logger on w, chosen as LogOutput.Logger does.
func NewLogger(w io.Writer, c LogConfig) *slog.Logger {
	l, _ := LogOutput{Stderr: w}.Logger(c)
	return l
}

// Logger returns the agent's logger and the format it chose. auto means:
// the journal's native protocol when stderr is the stream systemd
// connected to the journal (one field per attribute, so `journalctl
// EVENT=incident.opened` works), text on a terminal, JSON otherwise (other
// service managers and log shippers get one parseable record per event).
// Anything journald does not take is written to stderr as JSON instead.
func (o LogOutput) Logger(c LogConfig) (*slog.Logger, LogFormat) {
	w := o.Stderr
	if w == nil {
		w = os.Stderr
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	opts := &slog.HandlerOptions{Level: c.Level.Level()}
	format := c.Format
	if format == "" || format == LogAuto {
		format = LogJSON
		if f, ok := w.(*os.File); ok {
			if isJournalStream(getenv, f) {
				format = LogJournal
			} else if isTerminal(f) {
				format = LogText
			}
		}
	}
	// slog's text handler quotes a control character, its JSON handler
	// leaves C1 (U+009B, CSI) raw: a holder's command line logged as an
	// attribute must not reach a terminal or a log viewer as one.
	w = termsafe.NewWriter(w)
	switch format {
	case LogText:
		return slog.New(slog.NewTextHandler(w, opts)), LogText
	case LogJournal:
		id := o.Identifier
		if id == "" {
			id = "agentd"
		}
		h, err := journald.New(journald.Options{
			Level: opts.Level, Identifier: id, Socket: o.JournalSocket, AddSource: true,
			Fallback: slog.NewJSONHandler(w, opts),
		})
		if err == nil {
			return slog.New(h), LogJournal
		}
		l := slog.New(slog.NewJSONHandler(w, opts))
		l.Warn("journal logging unavailable; logging JSON to stderr", "subsystem", "log", "err", err)
		return l, LogJSON
	}
	return slog.New(slog.NewJSONHandler(w, opts)), LogJSON
}

func isJournalStream(getenv func(string) string, f *os.File) bool {
	ok, err := journald.IsJournalStream(getenv("JOURNAL_STREAM"), f)
	// A malformed value is as good as none: systemd did not set it.
	return err == nil && ok
}
