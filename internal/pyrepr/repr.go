package pyrepr

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// None is repr(None).
const None = "None"

type cpRange struct{ lo, hi rune }

func in(r rune, table []cpRange) bool {
	i := sort.Search(len(table), func(i int) bool { return table[i].hi >= r })
	return i < len(table) && table[i].lo <= r
}

// IsPrintable is Python 3.11's str.isprintable() for one code point.
func IsPrintable(r rune) bool {
	if r < 0x20 || r == 0x7f {
		return false
	}
	if r < 0x7f {
		return true
	}
	return !in(r, unassigned) && !in(r, otherNonPrintable)
}

// isNoncharacter: the 66 code points Unicode keeps unassigned for ever.
func isNoncharacter(r rune) bool {
	return (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe
}

// Unstable reports whether s holds a code point that is unassigned in
// Unicode 14.0.0 (and not one of the permanent noncharacters): a later
// edition may assign it, and a Python built on it would call it printable
// and write it as is where this package escapes it.
func Unstable(s string) bool {
	for i := 0; i < len(s); {
		r, n := decode(s, i)
		if r >= 0x80 && in(r, unassigned) && !isNoncharacter(r) {
			return true
		}
		i += n
	}
	return false
}

// decode reads one code point of WTF-8 at s[i]: a surrogate's three-byte
// form gives the surrogate; a byte that starts no valid sequence gives
// U+DC80+byte, as surrogateescape decodes it.
func decode(s string, i int) (rune, int) {
	c := s[i]
	if c < 0x80 {
		return rune(c), 1
	}
	if c == 0xed && i+2 < len(s) && s[i+1] >= 0xa0 && s[i+1] <= 0xbf && s[i+2]&0xc0 == 0x80 {
		return 0xd000 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), 3
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return 0xdc00 + rune(c), 1
	}
	return r, n
}

const hexDigits = "0123456789abcdef"

// Str is repr() of a str.
func Str(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		r, n := decode(s, i)
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(r))
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			hexEscape(&b, 'x', r, 2)
		case r < 0x7f:
			b.WriteByte(byte(r))
		case IsPrintable(r):
			b.WriteString(s[i : i+n])
		case r <= 0xff:
			hexEscape(&b, 'x', r, 2)
		case r <= 0xffff:
			hexEscape(&b, 'u', r, 4)
		default:
			hexEscape(&b, 'U', r, 8)
		}
		i += n
	}
	b.WriteByte(quote)
	return b.String()
}

func hexEscape(b *strings.Builder, kind byte, r rune, digits int) {
	b.WriteByte('\\')
	b.WriteByte(kind)
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// Int is repr() of an int.
func Int(n int64) string { return strconv.FormatInt(n, 10) }

// Float is repr() of a float: "inf", "-inf", "nan"; otherwise the
// shortest digits that read back as the same double, positional with at
// least one digit after the point ("1700000000.5", "100.0", "-0.0")
// unless the decimal exponent is below -4 or at least 16, where it is
// d[.ddd]e±XX with at least two exponent digits ("1e+16", "1.5e-05").
func Float(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX, shortest round trip
	var b strings.Builder
	if e[0] == '-' {
		b.WriteByte('-')
		e = e[1:]
	}
	k := strings.IndexByte(e, 'e')
	digits := strings.Replace(e[:k], ".", "", 1)
	exp, _ := strconv.Atoi(e[k+1:])
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

// Tuple is repr() of a tuple whose items' reprs are given: "()",
// "(x,)" for one item, else "(x, y, ...)".
func Tuple(items ...string) string {
	switch len(items) {
	case 0:
		return "()"
	case 1:
		return "(" + items[0] + ",)"
	}
	return "(" + strings.Join(items, ", ") + ")"
}
