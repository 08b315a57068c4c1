// Package termsafe makes text from outside stateguard safe to print on a
// terminal. A holder's command line, a profile name, a path or an error
// quoting one is chosen by whoever made the process or the file, often
// another user: an ESC (C0) or a CSI (U+009B, C1) in it would reach the
// operator's terminal, which interprets them (move the cursor, rewrite
// what was printed, on some terminals answer back into the input). Every
// such character, and every byte that is not UTF-8, is written as an
// escape instead.
package termsafe

import (
	"encoding/json"
	"io"
	"sync"
	"unicode/utf8"
)

// String returns s with every C0 control (newline and tab included), DEL,
// C1 control and invalid UTF-8 byte escaped: a byte as \xNN, DEL and a C1
// character as \u00NN (so JSON, which has neither C0 nor invalid bytes
// raw, stays valid JSON through the same rule). Use it for one value that
// must stay on one line (a table cell).
func String(s string) string {
	if clean(s, nil) {
		return s
	}
	return string(escape(nil, []byte(s), nil))
}

// IsControl reports whether r is a C0 control, DEL or a C1 control.
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// layout keeps the two controls a text report is made of.
func layout(r rune) bool { return r == '\n' || r == '\t' }

// clean reports whether s needs no escape (keep, when set, lists the
// controls that may stay).
func clean(s string, keep func(rune) bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (IsControl(r) && (keep == nil || !keep(r))) {
			return false
		}
		i += size
	}
	return true
}

// escape appends p to dst with every control (but those keep allows) and
// invalid byte escaped. It is the one escaping rule of the package.
func escape(dst, p []byte, keep func(rune) bool) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, '\\', 'x', hex[p[i]>>4], hex[p[i]&0xf])
		case IsControl(r) && (keep == nil || !keep(r)):
			if r < 0x7f {
				dst = append(dst, '\\', 'x', hex[r>>4], hex[r&0xf])
			} else {
				dst = append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
			}
		default:
			dst = append(dst, p[i:i+size]...)
		}
		i += size
	}
	return dst
}

// Writer escapes everything written through it as String does, but keeps
// newlines and tabs: it wraps a verb's whole text output, so no Fprintf
// can forget. A UTF-8 sequence split across two writes is held until the
// next write (or Flush) so it is not taken for invalid bytes.
// It is safe for concurrent use: two slog handlers may share one.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	carry []byte
}

// NewWriter wraps w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf := p
	if len(t.carry) > 0 {
		buf = append(t.carry, p...)
		t.carry = nil
	}
	if k := partialTail(buf); k > 0 {
		t.carry = append([]byte(nil), buf[len(buf)-k:]...)
		buf = buf[:len(buf)-k]
	}
	if _, err := t.w.Write(escape(make([]byte, 0, len(buf)+16), buf, layout)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held partial sequence, escaped: nothing completes it.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.carry) == 0 {
		return nil
	}
	_, err := t.w.Write(escape(nil, t.carry, layout))
	t.carry = nil
	return err
}

// partialTail is how many bytes at the end of p start a UTF-8 sequence
// that is not complete yet.
func partialTail(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if p[i]&0xc0 == 0x80 {
			continue // a continuation byte: look further back
		}
		if p[i] >= 0xc0 && !utf8.FullRune(p[i:]) {
			return len(p) - i
		}
		return 0
	}
	return 0
}

// JSON rewrites the DEL and C1 characters encoding/json leaves raw in its
// strings as \u escapes, so JSON printed to a terminal stays valid JSON
// and harmless (encoding/json already escapes C0 and replaces invalid
// UTF-8, so only those are left for the rule to change).
func JSON(b []byte) []byte {
	if clean(string(b), layout) {
		return b
	}
	return escape(make([]byte, 0, len(b)+16), b, layout)
}

// EncodeJSON writes v as indented JSON, as JSON's would, through JSON.
func EncodeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(JSON(b), '\n'))
	return err
}
