package recovery

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// The JSON export is the session row's columns, in table order, plus
// "messages": every message row's columns, in table order, indented by
// two spaces. Values keep their SQLite type: null, integers without a
// decimal point, reals in Python's repr form (always with a point or an
// exponent), text as strings.
// What JSON cannot hold is an object with one key: {"$blob": base64} for
// a BLOB, {"$text": base64} for text that is not UTF-8, {"$real": "inf"}
// or "-inf" for an infinite real.
const (
	jsonBlobKey = "$blob"
	jsonTextKey = "$text"
	jsonRealKey = "$real"
)

// WriteJSON writes the export as JSON.
func (x *Export) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("{")
	first := true
	sep := func() {
		if !first {
			bw.WriteString(",")
		}
		first = false
		bw.WriteString("\n  ")
	}
	if x.Session != nil {
		for i, c := range x.Session.Cols {
			sep()
			writeJSONString(bw, c)
			bw.WriteString(": ")
			writeJSONValue(bw, x.Session.Vals[i])
		}
	} else {
		sep()
		bw.WriteString(`"id": `)
		writeJSONString(bw, x.SessionID)
	}
	sep()
	bw.WriteString(`"messages": [`)
	for i, m := range x.Messages {
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n    {")
		for j, c := range m.Cols {
			if j > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n      ")
			writeJSONString(bw, c)
			bw.WriteString(": ")
			writeJSONValue(bw, m.Vals[j])
		}
		bw.WriteString("\n    }")
	}
	if len(x.Messages) > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}

func writeJSONString(w *bufio.Writer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a transcript is read by people: keep <, > and & as they are
	_ = enc.Encode(s)
	w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

func writeJSONValue(w *bufio.Writer, v any) {
	switch x := v.(type) {
	case nil:
		w.WriteString("null")
	case int64:
		w.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsInf(x, 1):
			fmt.Fprintf(w, `{%q: "inf"}`, jsonRealKey)
		case math.IsInf(x, -1):
			fmt.Fprintf(w, `{%q: "-inf"}`, jsonRealKey)
		case math.IsNaN(x):
			w.WriteString("null") // SQLite stores NaN as NULL
		default:
			// Python's repr, as Hermes writes floats: 1759303488.5,
			// 1759303488.0, 1e+16; always with a point or an exponent.
			w.WriteString(pyjson.FloatRepr(x))
		}
	case string:
		if !utf8.ValidString(x) {
			fmt.Fprintf(w, `{%q: %q}`, jsonTextKey, base64.StdEncoding.EncodeToString([]byte(x)))
			return
		}
		writeJSONString(w, x)
	case []byte:
		fmt.Fprintf(w, `{%q: %q}`, jsonBlobKey, base64.StdEncoding.EncodeToString(x))
	case bool:
		if x {
			w.WriteString("1")
		} else {
			w.WriteString("0")
		}
	default:
		writeJSONString(w, fmt.Sprint(x))
	}
}

// ParseExportJSON reads what WriteJSON wrote back into an Export, every
// value with the type it had in the store.
func ParseExportJSON(r io.Reader) (*Export, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	x := &Export{}
	sess := Row{}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		if key == "messages" {
			if x.Messages, err = parseMessages(dec); err != nil {
				return nil, err
			}
			continue
		}
		v, err := parseValue(dec)
		if err != nil {
			return nil, fmt.Errorf("session column %s: %w", key, err)
		}
		sess.Cols = append(sess.Cols, key)
		sess.Vals = append(sess.Vals, v)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	x.Session = &sess
	x.SessionID, _ = sess.Text("id")
	return x, nil
}

func parseMessages(dec *json.Decoder) ([]Row, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var out []Row
	for dec.More() {
		if err := expectDelim(dec, '{'); err != nil {
			return nil, err
		}
		var row Row
		for dec.More() {
			key, err := objectKey(dec)
			if err != nil {
				return nil, err
			}
			v, err := parseValue(dec)
			if err != nil {
				return nil, fmt.Errorf("message %d column %s: %w", len(out)+1, key, err)
			}
			row.Cols = append(row.Cols, key)
			row.Vals = append(row.Vals, v)
		}
		if err := expectDelim(dec, '}'); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, expectDelim(dec, ']')
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return nil, nil
	case string:
		return t, nil
	case json.Number:
		s := t.String()
		if strings.ContainsAny(s, ".eE") {
			return strconv.ParseFloat(s, 64)
		}
		return strconv.ParseInt(s, 10, 64)
	case json.Delim:
		if t != '{' {
			return nil, fmt.Errorf("unexpected %v", t)
		}
		key, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		var s string
		if err := dec.Decode(&s); err != nil {
			return nil, err
		}
		if err := expectDelim(dec, '}'); err != nil {
			return nil, err
		}
		switch key {
		case jsonBlobKey, jsonTextKey:
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, err
			}
			if key == jsonTextKey {
				return string(b), nil
			}
			return b, nil
		case jsonRealKey:
			if s == "-inf" {
				return math.Inf(-1), nil
			}
			return math.Inf(1), nil
		}
		return nil, fmt.Errorf("unknown typed value %q", key)
	}
	return nil, fmt.Errorf("unexpected %v", tok)
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	k, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want an object key, got %v", tok)
	}
	return k, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("export JSON ends early, want %v", d)
		}
		return err
	}
	if tok != d {
		return fmt.Errorf("export JSON: want %v, got %v", d, tok)
	}
	return nil
}
