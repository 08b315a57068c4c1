package pyjson

import (
	"strconv"
)

// Kind is the Python type a JSON value decodes to.
type Kind uint8

// The kinds of Value, named after the Python types json.loads returns.
const (
	KindNull Kind = iota
	KindBool
	KindInt
	KindFloat
	KindStr
	KindList
	KindDict
)

// Value is a JSON value as Python's json module sees it. Recovery ids hash
// Python's serialization of the record, so the model keeps what Python
// keeps and Go's encoding/json loses: integer vs float literals (Python
// ints are unbounded, so Int holds the decimal text), dict key order with
// duplicate keys collapsed the way a dict assignment does, NaN and
// Infinity, and lone UTF-16 surrogates from \u escapes (held as WTF-8,
// 0xED 0xA0-0xBF xx, so they can be told apart from valid text).
//
// The zero value is JSON null.
type Value struct {
	Kind  Kind
	Bool  bool
	Int   string // decimal text, no leading zeros, "-0" normalised to "0"
	Float float64
	Str   string
	List  []Value
	Dict  []Member
}

// Member is one key of a dict, in insertion order.
type Member struct {
	Key   string
	Value Value
}

// String returns a str value.
func String(s string) Value { return Value{Kind: KindStr, Str: s} }

// Int64 returns an int value.
func Int64(n int64) Value { return Value{Kind: KindInt, Int: strconv.FormatInt(n, 10)} }

// Float64 returns a float value.
func Float64(f float64) Value { return Value{Kind: KindFloat, Float: f} }

// Get returns the value of key in a dict.
func (v Value) Get(key string) (Value, bool) {
	if v.Kind != KindDict {
		return Value{}, false
	}
	for _, m := range v.Dict {
		if m.Key == key {
			return m.Value, true
		}
	}
	return Value{}, false
}

// Set assigns key in a dict the way Python does: an existing key keeps its
// position, a new one goes last.
func (v *Value) Set(key string, val Value) {
	for i := range v.Dict {
		if v.Dict[i].Key == key {
			v.Dict[i].Value = val
			return
		}
	}
	v.Kind = KindDict
	v.Dict = append(v.Dict, Member{Key: key, Value: val})
}

// Truthy is Python's bool(v).
func (v Value) Truthy() bool {
	switch v.Kind {
	case KindBool:
		return v.Bool
	case KindInt:
		return v.Int != "0"
	case KindFloat:
		return v.Float != 0 // NaN is truthy in Python too
	case KindStr:
		return v.Str != ""
	case KindList:
		return len(v.List) > 0
	case KindDict:
		return len(v.Dict) > 0
	}
	return false
}

// Equal is Python's == between two decoded JSON values: bool and int and
// float compare as numbers, str only with str, lists element-wise, dicts
// regardless of key order.
func Equal(a, b Value) bool {
	an, aNum := a.number()
	bn, bNum := b.number()
	if aNum && bNum {
		if a.Kind != KindFloat && b.Kind != KindFloat {
			return a.intText() == b.intText()
		}
		return an == bn
	}
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindNull:
		return true
	case KindStr:
		return a.Str == b.Str
	case KindList:
		if len(a.List) != len(b.List) {
			return false
		}
		for i := range a.List {
			if !Equal(a.List[i], b.List[i]) {
				return false
			}
		}
		return true
	case KindDict:
		if len(a.Dict) != len(b.Dict) {
			return false
		}
		for _, m := range a.Dict {
			o, ok := b.Get(m.Key)
			if !ok || !Equal(m.Value, o) {
				return false
			}
		}
		return true
	}
	return false
}

// number is the value as a float for bool/int/float; ints too large for a
// float64 still compare exactly through intText.
func (v Value) number() (float64, bool) {
	switch v.Kind {
	case KindBool:
		if v.Bool {
			return 1, true
		}
		return 0, true
	case KindInt:
		f, _ := strconv.ParseFloat(v.Int, 64)
		return f, true
	case KindFloat:
		return v.Float, true
	}
	return 0, false
}

func (v Value) intText() string {
	if v.Kind == KindBool {
		if v.Bool {
			return "1"
		}
		return "0"
	}
	return v.Int
}
