package walsalvage

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Kind is a value's SQLite storage class.
type Kind uint8

// The storage classes.
const (
	Null Kind = iota
	Integer
	Real
	Text
	Blob
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Integer:
		return "integer"
	case Real:
		return "real"
	case Text:
		return "text"
	case Blob:
		return "blob"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Value is one field of a row, with the storage class SQLite stored it
// in. The zero value is NULL.
type Value struct {
	Kind Kind
	Int  int64
	Real float64
	Text string // as stored: a UTF-8 database's bytes, unchecked
	Blob []byte
}

// IntValue, RealValue, TextValue and BlobValue make values.
func IntValue(v int64) Value    { return Value{Kind: Integer, Int: v} }
func RealValue(v float64) Value { return Value{Kind: Real, Real: v} }
func TextValue(v string) Value  { return Value{Kind: Text, Text: v} }
func BlobValue(v []byte) Value  { return Value{Kind: Blob, Blob: v} }
func (v Value) IsNull() bool    { return v.Kind == Null }
func (v Value) String() string  { b, _ := v.MarshalJSON(); return string(b) }

// Any is the value as database/sql's driver hands it over: nil, int64,
// float64, string or []byte, so code that scans rows can take it as is.
func (v Value) Any() any {
	switch v.Kind {
	case Integer:
		return v.Int
	case Real:
		return v.Real
	case Text:
		return v.Text
	case Blob:
		return v.Blob
	}
	return nil
}

// jsonValue is a Value in JSON: one key naming the class. Integers are
// strings so 64 bits survive; a real that JSON cannot hold is a string.
type jsonValue struct {
	Null bool            `json:"null,omitempty"`
	Int  string          `json:"int,omitempty"`
	Real json.RawMessage `json:"real,omitempty"`
	Text *string         `json:"text,omitempty"`
	Blob *string         `json:"blob,omitempty"`
}

// MarshalJSON writes {"null":true}, {"int":"5"}, {"real":1.5},
// {"text":"..."} or {"blob":"<base64>"}.
func (v Value) MarshalJSON() ([]byte, error) {
	var j jsonValue
	switch v.Kind {
	case Null:
		j.Null = true
	case Integer:
		j.Int = strconv.FormatInt(v.Int, 10)
	case Real:
		if math.IsInf(v.Real, 0) || math.IsNaN(v.Real) {
			j.Real = json.RawMessage(strconv.Quote(strconv.FormatFloat(v.Real, 'g', -1, 64)))
		} else {
			j.Real = json.RawMessage(strconv.FormatFloat(v.Real, 'g', -1, 64))
		}
	case Text:
		j.Text = &v.Text
	case Blob:
		s := base64.StdEncoding.EncodeToString(v.Blob)
		j.Blob = &s
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Value) UnmarshalJSON(b []byte) error {
	var j jsonValue
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	switch {
	case j.Int != "":
		n, err := strconv.ParseInt(j.Int, 10, 64)
		*v = IntValue(n)
		return err
	case j.Real != nil:
		var s string
		if json.Unmarshal(j.Real, &s) == nil {
			f, err := strconv.ParseFloat(s, 64)
			*v = RealValue(f)
			return err
		}
		var f float64
		err := json.Unmarshal(j.Real, &f)
		*v = RealValue(f)
		return err
	case j.Text != nil:
		*v = TextValue(*j.Text)
	case j.Blob != nil:
		d, err := base64.StdEncoding.DecodeString(*j.Blob)
		*v = BlobValue(d)
		return err
	default:
		*v = Value{}
	}
	return nil
}
