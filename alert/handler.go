package alert

import (
	"context"
	"log/slog"
)

// MinLevel is the least level a record must have to be alerted: the
// protocol's events are info, warn and error; debug records never page
// anyone.
const MinLevel = slog.LevelInfo

// Handler tees a log handler: every record carrying an "event" key goes
// to the alerter as well, so the log line and the alert are the same
// event and no call site has to remember both. The two paths are
// independent: with log.level = "warn" an info event (incident.resolved,
// capture.written, replay.done) is not logged but is still alerted, and
// events in the alerter's Quiet list are logged but never alerted.
// Alerter.Send never blocks, so logging stays off the incident path's
// critical section.
func Handler(next slog.Handler, al *Alerter) slog.Handler {
	if al == nil {
		return next
	}
	return &alertHandler{next: next, al: al}
}

type alertHandler struct {
	next  slog.Handler
	al    *Alerter
	attrs []slog.Attr
}

// Enabled is true for what the log wants and for anything alertable: a
// record must exist to be alerted.
func (h *alertHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= MinLevel || h.next.Enabled(ctx, l)
}

func (h *alertHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= MinLevel {
		h.alert(r)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *alertHandler) alert(r slog.Record) {
	fields := map[string]any{}
	var event, storePath string
	add := func(a slog.Attr) bool {
		v := a.Value.Resolve()
		switch a.Key {
		case "event":
			event = v.String()
		case "store":
			storePath = v.String()
		case "subsystem":
		default:
			fields[a.Key] = v.Any()
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if event != "" && !h.al.quiet[event] {
		fields["message"] = r.Message
		h.al.Send(Alert{Event: event, Level: r.Level, Store: storePath, Time: r.Time, Fields: fields})
	}
}

func (h *alertHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &alertHandler{next: h.next.WithAttrs(as), al: h.al, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup keeps alert fields flat: a group only prefixes the log output.
func (h *alertHandler) WithGroup(name string) slog.Handler {
	return &alertHandler{next: h.next.WithGroup(name), al: h.al, attrs: h.attrs}
}
