package recovery

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PyKind is the Python type a JSON value decodes to.
type PyKind uint8

// The kinds of PyValue, named after the Python types json.loads returns.
const (
	PyKindNull PyKind = iota
	PyKindBool
	PyKindInt
	PyKindFloat
	PyKindStr
	PyKindList
	PyKindDict
)

// PyValue is a JSON value as Python's json module sees it. Recovery ids hash
// Python's serialization of the record, so the model keeps what Python
// keeps and Go's encoding/json loses: integer vs float literals (Python
// ints are unbounded, so Int holds the decimal text), dict key order with
// duplicate keys collapsed the way a dict assignment does, NaN and
// Infinity, and lone UTF-16 surrogates from \u escapes (held as WTF-8,
// 0xED 0xA0-0xBF xx, so they can be told apart from valid text).
//
// The zero value is JSON null.
type PyValue struct {
	Kind  PyKind
	Bool  bool
	Int   string // decimal text, no leading zeros, "-0" normalised to "0"
	Float float64
	Str   string
	List  []PyValue
	Dict  []PyMember
}

// PyMember is one key of a dict, in insertion order.
type PyMember struct {
	Key   string
	Value PyValue
}

// PyString returns a str value.
func PyString(s string) PyValue { return PyValue{Kind: PyKindStr, Str: s} }

// PyInt64 returns an int value.
func PyInt64(n int64) PyValue { return PyValue{Kind: PyKindInt, Int: strconv.FormatInt(n, 10)} }

// PyFloat64 returns a float value.
func PyFloat64(f float64) PyValue { return PyValue{Kind: PyKindFloat, Float: f} }

// Get returns the value of key in a dict.
func (v PyValue) Get(key string) (PyValue, bool) {
	if v.Kind != PyKindDict {
		return PyValue{}, false
	}
	for _, m := range v.Dict {
		if m.Key == key {
			return m.Value, true
		}
	}
	return PyValue{}, false
}

// Set assigns key in a dict the way Python does: an existing key keeps its
// position, a new one goes last.
func (v *PyValue) Set(key string, val PyValue) {
	for i := range v.Dict {
		if v.Dict[i].Key == key {
			v.Dict[i].Value = val
			return
		}
	}
	v.Kind = PyKindDict
	v.Dict = append(v.Dict, PyMember{Key: key, Value: val})
}

// Truthy is Python's bool(v).
func (v PyValue) Truthy() bool {
	switch v.Kind {
	case PyKindBool:
		return v.Bool
	case PyKindInt:
		return v.Int != "0"
	case PyKindFloat:
		return v.Float != 0 // NaN is truthy in Python too
	case PyKindStr:
		return v.Str != ""
	case PyKindList:
		return len(v.List) > 0
	case PyKindDict:
		return len(v.Dict) > 0
	}
	return false
}

// PyEqual is Python's == between two decoded JSON values: bool and int and
// float compare as numbers, str only with str, lists element-wise, dicts
// regardless of key order.
func PyEqual(a, b PyValue) bool {
	an, aNum := a.number()
	bn, bNum := b.number()
	if aNum && bNum {
		if a.Kind != PyKindFloat && b.Kind != PyKindFloat {
			return a.intText() == b.intText()
		}
		return an == bn
	}
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case PyKindNull:
		return true
	case PyKindStr:
		return a.Str == b.Str
	case PyKindList:
		if len(a.List) != len(b.List) {
			return false
		}
		for i := range a.List {
			if !PyEqual(a.List[i], b.List[i]) {
				return false
			}
		}
		return true
	case PyKindDict:
		if len(a.Dict) != len(b.Dict) {
			return false
		}
		for _, m := range a.Dict {
			o, ok := b.Get(m.Key)
			if !ok || !PyEqual(m.Value, o) {
				return false
			}
		}
		return true
	}
	return false
}

// number is the value as a float for bool/int/float; ints too large for a
// float64 still compare exactly through intText.
func (v PyValue) number() (float64, bool) {
	switch v.Kind {
	case PyKindBool:
		if v.Bool {
			return 1, true
		}
		return 0, true
	case PyKindInt:
		f, _ := strconv.ParseFloat(v.Int, 64)
		return f, true
	case PyKindFloat:
		return v.Float, true
	}
	return 0, false
}

func (v PyValue) intText() string {
	if v.Kind == PyKindBool {
		if v.Bool {
			return "1"
		}
		return "0"
	}
	return v.Int
}

// PyJSONError is a line Python's json.loads would reject.
type PyJSONError struct {
	Msg string
	Pos int // byte offset
}

func (e *PyJSONError) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Pos) }

// pyMaxIntDigits is CPython's default int_max_str_digits: json.loads
// raises ValueError for a longer integer literal.
const pyMaxIntDigits = 4300

// pyMaxDepth bounds nesting. CPython gives up near 1000 levels with a
// RecursionError (which aborts a Hermes import outright), so anything
// deeper than this cannot be in a file Hermes replays.
const pyMaxDepth = 10000

// ParsePyJSON decodes s the way Python's json.loads does on a str: strict
// control characters, NaN/Infinity/-Infinity accepted, surrogate pairs
// joined, lone surrogates kept (as WTF-8), duplicate keys collapsed (last
// value, first position), a leading U+FEFF rejected. s must be UTF-8
// (decode bytes with DecodeUTF8Replace first, as Hermes reads with
// errors="replace").
func ParsePyJSON(s string) (PyValue, error) {
	p := pyParser{s: s}
	if strings.HasPrefix(s, "\ufeff") {
		return PyValue{}, &PyJSONError{Msg: "Unexpected UTF-8 BOM", Pos: 0}
	}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return PyValue{}, err
	}
	p.ws()
	if p.i != len(s) {
		return PyValue{}, p.fail("Extra data")
	}
	return v, nil
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) fail(msg string) error { return &PyJSONError{Msg: msg, Pos: p.i} }

func (p *pyParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *pyParser) value(depth int) (PyValue, error) {
	if depth > pyMaxDepth {
		return PyValue{}, p.fail("nesting too deep")
	}
	if p.i >= len(p.s) {
		return PyValue{}, p.fail("Expecting value")
	}
	switch c := p.s[p.i]; {
	case c == '"':
		p.i++
		s, err := p.str()
		return PyString(s), err
	case c == '{':
		return p.dict(depth)
	case c == '[':
		return p.list(depth)
	case strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return PyValue{}, nil
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return PyValue{Kind: PyKindBool, Bool: true}, nil
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return PyValue{Kind: PyKindBool}, nil
	case strings.HasPrefix(p.s[p.i:], "NaN"):
		p.i += 3
		return PyFloat64(math.NaN()), nil
	case strings.HasPrefix(p.s[p.i:], "Infinity"):
		p.i += 8
		return PyFloat64(math.Inf(1)), nil
	case strings.HasPrefix(p.s[p.i:], "-Infinity"):
		p.i += 9
		return PyFloat64(math.Inf(-1)), nil
	case c == '-' || isDigit(c):
		return p.number()
	}
	return PyValue{}, p.fail("Expecting value")
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number follows CPython's _match_number_unicode: a fraction needs a digit
// after the dot and an exponent a digit after e[+-], otherwise the number
// ends before them (and the leftover is "Extra data" or a delimiter error).
func (p *pyParser) number() (PyValue, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9':
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	case p.i < len(p.s) && p.s[p.i] == '0':
		p.i++
	default:
		p.i = start
		return PyValue{}, p.fail("Expecting value")
	}
	intEnd := p.i
	isFloat := false
	if p.i+1 < len(p.s) && p.s[p.i] == '.' && isDigit(p.s[p.i+1]) {
		isFloat = true
		p.i += 2
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		e := p.i
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		digits := p.i
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
		if p.i > digits {
			isFloat = true
		} else {
			p.i = e
		}
	}
	lit := p.s[start:p.i]
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !isRangeErr(err) {
			return PyValue{}, &PyJSONError{Msg: "bad float " + lit, Pos: start}
		}
		// Python's float() overflows to inf without error, as ParseFloat
		// does with ErrRange.
		return PyFloat64(f), nil
	}
	digits := lit
	neg := false
	if digits[0] == '-' {
		neg, digits = true, digits[1:]
	}
	if len(digits) > pyMaxIntDigits {
		return PyValue{}, &PyJSONError{Msg: "integer literal exceeds Python's 4300-digit limit", Pos: start}
	}
	_ = intEnd
	if digits == "0" {
		neg = false
	}
	if neg {
		digits = "-" + digits
	}
	return PyValue{Kind: PyKindInt, Int: digits}, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func (p *pyParser) list(depth int) (PyValue, error) {
	p.i++ // [
	v := PyValue{Kind: PyKindList, List: []PyValue{}}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		elem, err := p.value(depth + 1)
		if err != nil {
			return PyValue{}, err
		}
		v.List = append(v.List, elem)
		p.ws()
		if p.i >= len(p.s) {
			return PyValue{}, p.fail("Expecting ',' delimiter")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return v, nil
		default:
			return PyValue{}, p.fail("Expecting ',' delimiter")
		}
	}
}

func (p *pyParser) dict(depth int) (PyValue, error) {
	p.i++ // {
	v := PyValue{Kind: PyKindDict, Dict: []PyMember{}}
	var index map[string]int // built only when a dict grows, for duplicate keys
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return PyValue{}, p.fail("Expecting property name enclosed in double quotes")
		}
		p.i++
		key, err := p.str()
		if err != nil {
			return PyValue{}, err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return PyValue{}, p.fail("Expecting ':' delimiter")
		}
		p.i++
		p.ws()
		val, err := p.value(depth + 1)
		if err != nil {
			return PyValue{}, err
		}
		if index == nil && len(v.Dict) >= 8 {
			index = make(map[string]int, 16)
			for i, m := range v.Dict {
				index[m.Key] = i
			}
		}
		pos := -1
		if index != nil {
			if i, ok := index[key]; ok {
				pos = i
			}
		} else {
			for i, m := range v.Dict {
				if m.Key == key {
					pos = i
					break
				}
			}
		}
		if pos >= 0 {
			v.Dict[pos].Value = val
		} else {
			if index != nil {
				index[key] = len(v.Dict)
			}
			v.Dict = append(v.Dict, PyMember{Key: key, Value: val})
		}
		p.ws()
		if p.i >= len(p.s) {
			return PyValue{}, p.fail("Expecting ',' delimiter")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, nil
		default:
			return PyValue{}, p.fail("Expecting ',' delimiter")
		}
	}
}

// str scans a string body after the opening quote, as CPython's strict
// scanstring does.
func (p *pyParser) str() (string, error) {
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.fail("Invalid control character")
		}
		p.i++
	}
	var b strings.Builder
	b.WriteString(p.s[start:p.i])
	for {
		if p.i >= len(p.s) {
			return "", &PyJSONError{Msg: "Unterminated string", Pos: start - 1}
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20:
			return "", p.fail("Invalid control character")
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		p.i++ // backslash
		if p.i >= len(p.s) {
			return "", &PyJSONError{Msg: "Unterminated string", Pos: start - 1}
		}
		esc := p.s[p.i]
		p.i++
		switch esc {
		case '"', '\\', '/':
			b.WriteByte(esc)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if r >= 0xd800 && r <= 0xdbff && strings.HasPrefix(p.s[p.i:], "\\u") {
				save := p.i
				p.i += 2
				r2, err := p.hex4()
				if err != nil {
					return "", err
				}
				if r2 >= 0xdc00 && r2 <= 0xdfff {
					r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
				} else {
					p.i = save
				}
			}
			writeWTF8(&b, r)
		default:
			p.i -= 2
			return "", p.fail("Invalid \\escape")
		}
	}
}

func (p *pyParser) hex4() (rune, error) {
	if p.i+4 > len(p.s) {
		return 0, p.fail("Invalid \\uXXXX escape")
	}
	var r rune
	for _, c := range []byte(p.s[p.i : p.i+4]) {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, p.fail("Invalid \\uXXXX escape")
		}
	}
	p.i += 4
	return r, nil
}

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

// isPySpace is Python's str.isspace for one code point.
func isPySpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// pyStrip is Python's str.strip() with no arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, isPySpace) }
