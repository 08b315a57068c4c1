package store

import "fmt"

// MessageFromColumns builds a Message from column name → value, the
// values as database/sql's driver returns them (nil, int64, float64,
// string, []byte): for rows read some other way than through SQLite, such
// as those salvaged from WAL page images. Columns Message has no field
// for go to Extra; a column that is absent stays unset.
func MessageFromColumns(cols map[string]any) (Message, error) {
	var m Message
	if v, ok := cols["id"]; ok && v != nil {
		id, ok := asInt(v)
		if !ok {
			return Message{}, fmt.Errorf("message column id: %v (%T) is not an integer", v, v)
		}
		m.ID = id
	}
	known := fieldMap(m.fields())
	for c, v := range cols {
		if c == "id" {
			continue
		}
		if f, ok := known[c]; ok {
			if err := assign(f, v); err != nil {
				return Message{}, fmt.Errorf("message %d column %s: %w", m.ID, c, err)
			}
			continue
		}
		if m.Extra == nil {
			m.Extra = map[string]any{}
		}
		m.Extra[c] = v
	}
	return m, nil
}

// SessionFromColumns builds a Session from column name → value, like
// MessageFromColumns; columns Session does not know are ignored.
func SessionFromColumns(cols map[string]any) (Session, error) {
	var s Session
	known := fieldMap(s.fields())
	for c, v := range cols {
		if f, ok := known[c]; ok {
			if err := assign(f, v); err != nil {
				return Session{}, fmt.Errorf("session column %s: %w", c, err)
			}
		}
	}
	return s, nil
}
