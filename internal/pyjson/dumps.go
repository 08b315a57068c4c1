package pyjson

import (
	"math"
	"slices"
	"strconv"
	"strings"
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

// FloatRepr is Python's repr of a finite float: the shortest digits that
// round-trip, in positional form with at least one fractional digit
// ("1732912347.0") unless the decimal exponent is below -4 or at least 16,
// where it is d[.ddd]e±XX with at least two exponent digits ("1e+16",
// "1e-05").
func FloatRepr(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX, shortest round-trip digits
	var b strings.Builder
	if e[0] == '-' {
		b.WriteByte('-')
		e = e[1:]
	}
	k := strings.IndexByte(e, 'e')
	mant, expText := e[:k], e[k+1:]
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		b.WriteString(digits[:1])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if exp < 0 {
			b.WriteByte('-')
			exp = -exp
		} else {
			b.WriteByte('+')
		}
		if exp < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.Itoa(exp))
		return b.String()
	}
	point := exp + 1 // digits before the decimal point
	switch {
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
		b.WriteString(".0")
	default:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	}
	return b.String()
}
