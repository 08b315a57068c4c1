package store

import (
	"database/sql"
	"fmt"
	"math"
	"strconv"
)

// field binds a column name to a struct field: *string, *sql.NullString,
// *sql.NullFloat64, *sql.NullInt64 or *[]byte.
type field struct {
	name string
	ptr  any
}

func fieldMap(fs []field) map[string]field {
	m := make(map[string]field, len(fs))
	for _, f := range fs {
		m[f.name] = f
	}
	return m
}

// value is the field's bind value and whether it is set at all.
func (f field) value() (any, bool) {
	switch p := f.ptr.(type) {
	case *string:
		return *p, *p != ""
	case *sql.NullString:
		return p.String, p.Valid
	case *sql.NullFloat64:
		return p.Float64, p.Valid
	case *sql.NullInt64:
		return p.Int64, p.Valid
	case *[]byte:
		return *p, *p != nil
	}
	panic(fmt.Sprintf("store: field %s has unsupported type %T", f.name, f.ptr))
}

// assign stores a scanned value into the field. SQLite is dynamically
// typed and a damaged or foreign row can hold text in a REAL column, so
// conversions are lenient where no information is lost, and an error
// where it would be.
func assign(f field, v any) error {
	switch p := f.ptr.(type) {
	case *string:
		s, ok := asText(v)
		if !ok {
			return fmt.Errorf("null in a NOT NULL column")
		}
		*p = s
	case *sql.NullString:
		s, ok := asText(v)
		*p = sql.NullString{String: s, Valid: ok}
	case *sql.NullFloat64:
		if v == nil {
			*p = sql.NullFloat64{}
			return nil
		}
		x, ok := asFloat(v)
		if !ok {
			return fmt.Errorf("%v (%T) is not a number", v, v)
		}
		*p = sql.NullFloat64{Float64: x, Valid: true}
	case *sql.NullInt64:
		if v == nil {
			*p = sql.NullInt64{}
			return nil
		}
		x, ok := asInt(v)
		if !ok {
			return fmt.Errorf("%v (%T) is not an integer", v, v)
		}
		*p = sql.NullInt64{Int64: x, Valid: true}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*p = nil
		case []byte:
			*p = append([]byte{}, x...)
		case string:
			*p = []byte(x)
		default:
			return fmt.Errorf("%v (%T) is not a blob", v, v)
		}
	default:
		return fmt.Errorf("unsupported field type %T", f.ptr)
	}
	return nil
}

func asText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case []byte:
		return string(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case bool:
		if x {
			return "1", true
		}
		return "0", true
	}
	return fmt.Sprint(v), true
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	case []byte:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	}
	return 0, false
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), true
		}
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}
