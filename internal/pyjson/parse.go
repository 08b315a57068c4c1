package pyjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SyntaxError is a line Python's json.loads would reject.
type SyntaxError struct {
	Msg string
	Pos int // byte offset
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Pos) }

// pyMaxIntDigits is CPython's default int_max_str_digits: json.loads
// raises ValueError for a longer integer literal.
const pyMaxIntDigits = 4300

// pyMaxDepth bounds nesting. CPython gives up near 1000 levels with a
// RecursionError (which aborts a Hermes import outright), so anything
// deeper than this cannot be in a file Hermes replays.
const pyMaxDepth = 10000

// Parse decodes s the way Python's json.loads does on a str: strict
// control characters, NaN/Infinity/-Infinity accepted, surrogate pairs
// joined, lone surrogates kept (as WTF-8), duplicate keys collapsed (last
// value, first position), a leading U+FEFF rejected. s must be UTF-8
// (decode bytes with DecodeUTF8Replace first, as Hermes reads with
// errors="replace").
func Parse(s string) (Value, error) {
	p := pyParser{s: s}
	if strings.HasPrefix(s, "\ufeff") {
		return Value{}, &SyntaxError{Msg: "Unexpected UTF-8 BOM", Pos: 0}
	}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return Value{}, err
	}
	p.ws()
	if p.i != len(s) {
		return Value{}, p.fail("Extra data")
	}
	return v, nil
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) fail(msg string) error { return &SyntaxError{Msg: msg, Pos: p.i} }

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

func (p *pyParser) value(depth int) (Value, error) {
	if depth > pyMaxDepth {
		return Value{}, p.fail("nesting too deep")
	}
	if p.i >= len(p.s) {
		return Value{}, p.fail("Expecting value")
	}
	switch c := p.s[p.i]; {
	case c == '"':
		p.i++
		s, err := p.str()
		return String(s), err
	case c == '{':
		return p.dict(depth)
	case c == '[':
		return p.list(depth)
	case strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return Value{}, nil
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return Value{Kind: KindBool, Bool: true}, nil
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return Value{Kind: KindBool}, nil
	case strings.HasPrefix(p.s[p.i:], "NaN"):
		p.i += 3
		return Float64(math.NaN()), nil
	case strings.HasPrefix(p.s[p.i:], "Infinity"):
		p.i += 8
		return Float64(math.Inf(1)), nil
	case strings.HasPrefix(p.s[p.i:], "-Infinity"):
		p.i += 9
		return Float64(math.Inf(-1)), nil
	case c == '-' || isDigit(c):
		return p.number()
	}
	return Value{}, p.fail("Expecting value")
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number follows CPython's _match_number_unicode: a fraction needs a digit
// after the dot and an exponent a digit after e[+-], otherwise the number
// ends before them (and the leftover is "Extra data" or a delimiter error).
func (p *pyParser) number() (Value, error) {
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
		return Value{}, p.fail("Expecting value")
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
			return Value{}, &SyntaxError{Msg: "bad float " + lit, Pos: start}
		}
		// Python's float() overflows to inf without error, as ParseFloat
		// does with ErrRange.
		return Float64(f), nil
	}
	digits := lit
	neg := false
	if digits[0] == '-' {
		neg, digits = true, digits[1:]
	}
	if len(digits) > pyMaxIntDigits {
		return Value{}, &SyntaxError{Msg: "integer literal exceeds Python's 4300-digit limit", Pos: start}
	}
	_ = intEnd
	if digits == "0" {
		neg = false
	}
	if neg {
		digits = "-" + digits
	}
	return Value{Kind: KindInt, Int: digits}, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func (p *pyParser) list(depth int) (Value, error) {
	p.i++ // [
	v := Value{Kind: KindList, List: []Value{}}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		elem, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		v.List = append(v.List, elem)
		if done, err := p.delimiter(']'); err != nil {
			return Value{}, err
		} else if done {
			return v, nil
		}
	}
}

// delimiter reads what follows a container's element: ',' (another
// element follows) or closer (done), else CPython's error.
func (p *pyParser) delimiter(closer byte) (done bool, err error) {
	p.ws()
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case ',':
			p.i++
			return false, nil
		case closer:
			p.i++
			return true, nil
		}
	}
	return false, p.fail("Expecting ',' delimiter")
}

func (p *pyParser) dict(depth int) (Value, error) {
	p.i++ // {
	v := Value{Kind: KindDict, Dict: []Member{}}
	var index map[string]int // built only when a dict grows, for duplicate keys
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return Value{}, p.fail("Expecting property name enclosed in double quotes")
		}
		p.i++
		key, err := p.str()
		if err != nil {
			return Value{}, err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return Value{}, p.fail("Expecting ':' delimiter")
		}
		p.i++
		p.ws()
		val, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
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
			v.Dict = append(v.Dict, Member{Key: key, Value: val})
		}
		if done, err := p.delimiter('}'); err != nil {
			return Value{}, err
		} else if done {
			return v, nil
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
			return "", &SyntaxError{Msg: "Unterminated string", Pos: start - 1}
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
			return "", &SyntaxError{Msg: "Unterminated string", Pos: start - 1}
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
