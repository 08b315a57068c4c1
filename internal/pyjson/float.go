package pyjson

import (
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Float is Python's float(v) for a value from JSON, ok=false where
// Python raises (null, list, dict, a non-numeric str, an int too large).
// Strings follow float()'s grammar: surrounding whitespace, Unicode
// decimal digits, one underscore between digits, inf/infinity/nan in any
// case.
func Float(v Value) (float64, bool) {
	switch v.Kind {
	case KindBool:
		if v.Bool {
			return 1, true
		}
		return 0, true
	case KindInt:
		f, err := strconv.ParseFloat(v.Int, 64)
		if err != nil {
			return 0, false // OverflowError
		}
		return f, true
	case KindFloat:
		return v.Float, true
	case KindStr:
		return pyFloatString(v.Str)
	}
	return 0, false
}

func pyFloatString(s string) (float64, bool) {
	s = asciiDigits(strings.TrimFunc(s, isFloatSpace))
	body := s
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if s[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	if !pyFloatGrammar(body) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

// isFloatSpace is what float() strips: ASCII " \t\n\v\f\r" and non-ASCII
// whitespace (CPython maps the latter to ' ' first; ASCII 0x1c-0x1f, which
// str.isspace accepts, it keeps and then rejects).
func isFloatSpace(r rune) bool {
	if r < 0x80 {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return IsSpace(r)
}

// asciiDigits maps Unicode decimal digits to ASCII, as float() does. Every
// Nd block is ten code points from 0 to 9, so a digit's value is its
// offset in its range modulo 10.
func asciiDigits(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if d, ok := decimalValue(r); ok {
			b.WriteByte(byte('0' + d))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func decimalValue(r rune) (int, bool) {
	if r < 0x80 || !unicode.Is(unicode.Nd, r) {
		return 0, false
	}
	for _, rg := range unicode.Nd.R16 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10, true
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10, true
		}
	}
	return 0, false
}

// pyFloatGrammar checks digitpart ["." [digitpart]] [exponent] |
// "." digitpart [exponent], where digitpart is digits with single
// underscores between them.
func pyFloatGrammar(s string) bool {
	i := 0
	digitpart := func() bool {
		start := i
		for i < len(s) {
			switch {
			case isDigit(s[i]):
				i++
			case s[i] == '_' && i > start && i+1 < len(s) && isDigit(s[i+1]):
				i++
			default:
				return i > start
			}
		}
		return i > start
	}
	intPart := digitpart()
	frac := false
	if i < len(s) && s[i] == '.' {
		i++
		frac = digitpart()
	}
	if !intPart && !frac {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digitpart() {
			return false
		}
	}
	return i == len(s)
}
