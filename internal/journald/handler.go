package journald

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// DefaultSocket is where journald listens for native-protocol entries.
const DefaultSocket = "/run/systemd/journal/socket"

// Options configure a Handler. The zero value logs at info to
// DefaultSocket as the program's base name.
type Options struct {
	Level slog.Leveler
	// Identifier is SYSLOG_IDENTIFIER, what journalctl prints before each
	// line and matches with -t; "" means the program's base name.
	Identifier string
	// Socket is journald's socket; "" means DefaultSocket.
	Socket string
	// AddSource adds CODE_FILE, CODE_LINE and CODE_FUNC of the log call.
	AddSource bool
	// Fallback gets every record journald did not take (its socket is
	// gone, or it stopped reading for longer than the send timeout), so an
	// event is never dropped silently. nil: Handle returns the error.
	Fallback slog.Handler
}

// Handler writes records to journald. It is safe for concurrent use;
// handlers derived with WithAttrs and WithGroup share its socket.
type Handler struct {
	opts     Options
	out      *sender
	fields   []byte   // encoded fields of WithAttrs
	text     string   // the same attributes as " key=value" for MESSAGE
	groups   []string // open groups, outermost first
	fallback slog.Handler
}

// New opens a socket to send entries to journald from.
func New(o Options) (*Handler, error) {
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.Identifier == "" {
		o.Identifier = filepath.Base(os.Args[0])
	}
	if o.Level == nil {
		o.Level = slog.LevelInfo
	}
	out, err := newSender(o.Socket)
	if err != nil {
		return nil, err
	}
	return &Handler{opts: o, out: out, fallback: o.Fallback}, nil
}

// Close closes the socket; every handler derived from h stops working.
func (h *Handler) Close() error { return h.out.close() }

func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.opts.Level.Level()
}

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	var b []byte
	b = appendField(b, "PRIORITY", strconv.Itoa(Priority(r.Level)))
	b = appendField(b, "SYSLOG_IDENTIFIER", h.opts.Identifier)
	if h.opts.AddSource && r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		b = appendField(b, "CODE_FILE", f.File)
		b = appendField(b, "CODE_LINE", strconv.Itoa(f.Line))
		b = appendField(b, "CODE_FUNC", f.Function)
	}
	b = append(b, h.fields...)
	var text strings.Builder
	text.WriteString(r.Message)
	text.WriteString(h.text)
	r.Attrs(func(a slog.Attr) bool {
		b = appendAttr(b, &text, h.groups, a)
		return true
	})
	b = appendField(b, "MESSAGE", text.String())
	err := h.out.send(b)
	if err == nil {
		return nil
	}
	if h.fallback != nil && h.fallback.Enabled(ctx, r.Level) {
		return h.fallback.Handle(ctx, r)
	}
	return fmt.Errorf("send log entry to journald at %s: %w", h.opts.Socket, err)
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	n := *h
	n.fields = append([]byte(nil), h.fields...)
	var text strings.Builder
	text.WriteString(h.text)
	for _, a := range as {
		n.fields = appendAttr(n.fields, &text, h.groups, a)
	}
	n.text = text.String()
	if h.fallback != nil {
		n.fallback = h.fallback.WithAttrs(as)
	}
	return &n
}

func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.groups = append(append([]string(nil), h.groups...), name)
	if h.fallback != nil {
		n.fallback = h.fallback.WithGroup(name)
	}
	return &n
}

// appendAttr encodes one attribute as a field (a group as one field per
// member) and appends it to the text of MESSAGE as key=value, the way
// slog's text handler writes it, so `journalctl -u` without -o verbose
// still shows everything.
func appendAttr(b []byte, text *strings.Builder, groups []string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		sub := groups
		if a.Key != "" {
			sub = append(append([]string(nil), groups...), a.Key)
		}
		for _, m := range a.Value.Group() {
			b = appendAttr(b, text, sub, m)
		}
		return b
	}
	if a.Key == "" {
		return b
	}
	v := valueString(a.Value)
	text.WriteByte(' ')
	text.WriteString(strings.Join(append(append([]string(nil), groups...), a.Key), "."))
	text.WriteByte('=')
	text.WriteString(quoteIfNeeded(v))
	return appendField(b, FieldName(groups, a.Key), v)
}

func valueString(v slog.Value) string {
	switch v.Kind() {
	case slog.KindString:
		return v.String()
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return x.Error()
		case fmt.Stringer:
			return x.String()
		case []byte:
			return string(x)
		case nil:
			return "<nil>"
		}
		// Slices, maps and structs as JSON, as the JSON handler writes
		// them, so a field stays parseable.
		if j, err := json.Marshal(v.Any()); err == nil {
			return string(j)
		}
		return fmt.Sprintf("%+v", v.Any())
	}
	return v.String() // ints, floats, bools and durations format themselves
}

func quoteIfNeeded(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == '=' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
