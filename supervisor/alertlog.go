package supervisor

import (
	"context"
	"log/slog"
)

// AlertHandler wraps a log handler so that every record carrying an
// "event" key also goes to the alerter: the log line and the alert are the
// same event, and no call site has to remember both. Alerter.Send never
// blocks, so logging stays off the incident path's critical section.
func AlertHandler(next slog.Handler, al *Alerter) slog.Handler {
	if al == nil {
		return next
	}
	return &alertHandler{next: next, al: al}
}

// quietEvents are logged but not sent: they fire on every writer start
// and every discovery, which is not something to page anyone about.
var quietEvents = map[string]bool{
	EventGenerationChanged: true,
	EventStoreDiscovered:   true,
	EventStoreRemoved:      true,
	EventGuardCheckpointed: true,
}

type alertHandler struct {
	next  slog.Handler
	al    *Alerter
	attrs []slog.Attr
}

func (h *alertHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *alertHandler) Handle(ctx context.Context, r slog.Record) error {
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
	if event != "" && !quietEvents[event] {
		fields["message"] = r.Message
		h.al.Send(Alert{Event: event, Level: r.Level, Store: storePath, Time: r.Time, Fields: fields})
	}
	return h.next.Handle(ctx, r)
}

func (h *alertHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &alertHandler{next: h.next.WithAttrs(as), al: h.al, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup keeps alert fields flat: a group only prefixes the log output.
func (h *alertHandler) WithGroup(name string) slog.Handler {
	return &alertHandler{next: h.next.WithGroup(name), al: h.al, attrs: h.attrs}
}
