package pyjson

import (
	"math"
	"slices"
	"strings"

	"github.com/stateguard/stateguard/internal/pyrepr"
)

// DumpOptions are the json.dumps arguments stateguard needs to reproduce.
// Separators are always Python's defaults for indent=None: ", " and ": ".
type DumpOptions struct {
	SortKeys    bool // sort_keys=True: keys in code point order at every depth
	EnsureASCII bool // ensure_ascii=True (Python's default): non-ASCII as \uXXXX
}

// Dumps is Python's json.dumps(v, sort_keys=o.SortKeys,
// ensure_ascii=o.EnsureASCII), byte for byte. With EnsureASCII false a lone
// surrogate is written as-is (WTF-8), where Python would fail to encode the
// result to UTF-8: check with HasSurrogate.
func (v Value) Dumps(o DumpOptions) string {
	return string(v.AppendJSON(nil, o))
}

// AppendJSON appends Dumps(o) to dst.
func (v Value) AppendJSON(dst []byte, o DumpOptions) []byte {
	switch v.Kind {
	case KindNull:
		return append(dst, "null"...)
	case KindBool:
		if v.Bool {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case KindInt:
		return append(dst, v.Int...)
	case KindFloat:
		return append(dst, FloatJSON(v.Float)...)
	case KindStr:
		return appendPyString(dst, v.Str, o.EnsureASCII)
	case KindList:
		dst = append(dst, '[')
		for i, e := range v.List {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = e.AppendJSON(dst, o)
		}
		return append(dst, ']')
	case KindDict:
		members := v.Dict
		if o.SortKeys && len(members) > 1 {
			members = slices.Clone(members)
			// Byte order of UTF-8 (and WTF-8) is code point order, which is
			// how Python compares str.
			slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Key, b.Key) })
		}
		dst = append(dst, '{')
		for i, m := range members {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPyString(dst, m.Key, o.EnsureASCII)
			dst = append(dst, ": "...)
			dst = m.Value.AppendJSON(dst, o)
		}
		return append(dst, '}')
	}
	return dst
}

const hexDigits = "0123456789abcdef"

func appendU4(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// appendPyString quotes s as CPython's encoder does: \" \\ \n \r \t \b \f,
// other control characters as \u00XX (lowercase hex), and with ensureASCII
// everything outside 0x20-0x7E as \uXXXX (surrogate pairs above U+FFFF).
func appendPyString(dst []byte, s string, ensureASCII bool) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			switch {
			case c == '"':
				dst = append(dst, '\\', '"')
			case c == '\\':
				dst = append(dst, '\\', '\\')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c < 0x20 || (ensureASCII && c == 0x7f):
				dst = appendU4(dst, rune(c))
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := decodeWTF8(s, i)
		switch {
		case !ensureASCII:
			dst = append(dst, s[i:i+n]...)
		case r >= 0x10000:
			r -= 0x10000
			dst = appendU4(dst, 0xd800|(r>>10)&0x3ff)
			dst = appendU4(dst, 0xdc00|r&0x3ff)
		default:
			dst = appendU4(dst, r)
		}
		i += n
	}
	return append(dst, '"')
}

// FloatJSON is how json.dumps writes a float: NaN, Infinity, -Infinity,
// else Python's repr.
func FloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return FloatRepr(f)
}

// FloatRepr is Python's repr of a float, which json.dumps writes for a
// finite one: the shortest digits that round-trip, in positional form
// with at least one fractional digit ("1732912347.0") unless the decimal
// exponent is below -4 or at least 16 ("1e+16", "1e-05"). It is
// internal/pyrepr's, the one implementation of Python's repr.
func FloatRepr(f float64) string { return pyrepr.Float(f) }
