package pyjson

import (
	"strings"
	"unicode/utf8"
)

// writeWTF8 writes r as UTF-8, and a surrogate as its 3-byte generalized
// UTF-8 form, which utf8.Valid rejects.
func writeWTF8(b *strings.Builder, r rune) {
	if r >= 0xd800 && r <= 0xdfff {
		b.WriteByte(0xe0 | byte(r>>12))
		b.WriteByte(0x80 | byte(r>>6)&0x3f)
		b.WriteByte(0x80 | byte(r)&0x3f)
		return
	}
	b.WriteRune(r)
}

// decodeWTF8 decodes one code point of s at i, surrogates included. Invalid
// bytes (which DecodeUTF8Replace never leaves) decode as U+FFFD, width 1.
func decodeWTF8(s string, i int) (rune, int) {
	if i+2 < len(s) && s[i] == 0xed && s[i+1] >= 0xa0 && s[i+1] <= 0xbf && s[i+2]&0xc0 == 0x80 {
		return 0xd000 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), 3
	}
	return utf8.DecodeRuneInString(s[i:])
}

// HasSurrogate reports whether s holds a lone surrogate, which Python
// cannot encode to UTF-8.
func HasSurrogate(s string) bool { return !utf8.ValidString(s) }

// ScrubSurrogates replaces every lone surrogate with U+FFFD, as Hermes does
// before binding text to SQLite.
func ScrubSurrogates(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := decodeWTF8(s, i)
		if r >= 0xd800 && r <= 0xdfff {
			r = utf8.RuneError
		}
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// DecodeUTF8Replace decodes b as Python's bytes.decode("utf-8",
// errors="replace") does: every maximal invalid subpart (Unicode 3-7)
// becomes one U+FFFD. It reports whether anything was replaced.
func DecodeUTF8Replace(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			sb.WriteByte(c)
			i++
			continue
		}
		need, lo, hi := 0, byte(0x80), byte(0xbf)
		switch {
		case c >= 0xc2 && c <= 0xdf:
			need = 1
		case c == 0xe0:
			need, lo = 2, 0xa0
		case c == 0xed:
			need, hi = 2, 0x9f
		case c >= 0xe1 && c <= 0xef:
			need = 2
		case c == 0xf0:
			need, lo = 3, 0x90
		case c >= 0xf1 && c <= 0xf3:
			need = 3
		case c == 0xf4:
			need, hi = 3, 0x8f
		default:
			sb.WriteRune(utf8.RuneError)
			i++
			continue
		}
		j, ok := i+1, true
		for k := 0; k < need; k++ {
			l, h := byte(0x80), byte(0xbf)
			if k == 0 {
				l, h = lo, hi
			}
			if j >= len(b) || b[j] < l || b[j] > h {
				ok = false
				break
			}
			j++
		}
		if ok {
			sb.Write(b[i:j])
		} else {
			sb.WriteRune(utf8.RuneError)
		}
		i = j
	}
	return sb.String(), true
}

// IsSpace is Python's str.isspace for one code point.
func IsSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// Strip is Python's str.strip() with no arguments.
func Strip(s string) string { return strings.TrimFunc(s, IsSpace) }
