package walsalvage

import (
	"errors"
	"fmt"
	"strings"
)

// affinity is a column's type affinity, by SQLite's rules on the declared
// type (https://www.sqlite.org/datatype3.html, 3.1).
type affinity uint8

const (
	affBlob affinity = iota
	affText
	affNumeric
	affInteger
	affReal
)

func affinityOf(declared string) affinity {
	t := strings.ToUpper(declared)
	switch {
	case strings.Contains(t, "INT"):
		return affInteger
	case strings.Contains(t, "CHAR"), strings.Contains(t, "CLOB"), strings.Contains(t, "TEXT"):
		return affText
	case t == "" || strings.Contains(t, "BLOB"):
		return affBlob
	case strings.Contains(t, "REAL"), strings.Contains(t, "FLOA"), strings.Contains(t, "DOUB"):
		return affReal
	}
	return affNumeric
}

// column is one column a table's records store, in record order.
type column struct {
	Name     string
	Type     string // the declared type, as written
	NotNull  bool
	RowidKey bool // INTEGER PRIMARY KEY: the record holds NULL, the value is the rowid
}

var errNotCreateTable = errors.New("not a CREATE TABLE statement")

// parseCreateTable reads the table name and the stored columns of a
// CREATE TABLE statement as sqlite_master keeps it (ALTER TABLE ADD
// COLUMN rewrites that text, so it always lists every column). Virtual
// generated columns, which records do not store, are left out; a WITHOUT
// ROWID table is reported so its (index-shaped) pages are not looked for.
func parseCreateTable(sql string) (name string, cols []column, withoutRowid bool, err error) {
	toks, err := tokenize(sql)
	if err != nil {
		return "", nil, false, err
	}
	i := 0
	// expect consumes words when they come next, else nothing.
	expect := func(words ...string) bool {
		for k, w := range words {
			if i+k >= len(toks) || !strings.EqualFold(toks[i+k].text, w) || toks[i+k].quoted {
				return false
			}
		}
		i += len(words)
		return true
	}
	if !expect("CREATE") {
		return "", nil, false, errNotCreateTable
	}
	for i < len(toks) && !toks[i].quoted && (strings.EqualFold(toks[i].text, "TEMP") || strings.EqualFold(toks[i].text, "TEMPORARY")) {
		i++
	}
	if !expect("TABLE") {
		return "", nil, false, errNotCreateTable
	}
	expect("IF", "NOT", "EXISTS")
	if i >= len(toks) {
		return "", nil, false, fmt.Errorf("%w: no table name", errNotCreateTable)
	}
	name = toks[i].text
	i++
	if i+1 < len(toks) && toks[i].text == "." && !toks[i].quoted {
		name = toks[i+1].text
		i += 2
	}
	if i >= len(toks) || toks[i].text != "(" || toks[i].quoted {
		return "", nil, false, fmt.Errorf("%w: table %s has no column list", errNotCreateTable, name)
	}
	defs, end, err := splitDefs(toks, i)
	if err != nil {
		return "", nil, false, fmt.Errorf("table %s: %w", name, err)
	}
	for j := end + 1; j+1 < len(toks); j++ {
		if strings.EqualFold(toks[j].text, "WITHOUT") && strings.EqualFold(toks[j+1].text, "ROWID") {
			withoutRowid = true
		}
	}
	for _, d := range defs {
		if c, ok := columnDef(d); ok {
			cols = append(cols, c)
		}
	}
	if len(cols) == 0 {
		return "", nil, false, fmt.Errorf("%w: table %s has no columns", errNotCreateTable, name)
	}
	return name, cols, withoutRowid, nil
}

// splitDefs splits the parenthesised list that starts at toks[open] at
// its top-level commas, and returns where it closes.
func splitDefs(toks []token, open int) (defs [][]token, end int, err error) {
	depth := 0
	var cur []token
	for j := open; j < len(toks); j++ {
		t := toks[j]
		switch {
		case t.quoted:
		case t.text == "(":
			depth++
			if depth == 1 {
				continue
			}
		case t.text == ")":
			depth--
			if depth == 0 {
				return append(defs, cur), j, nil
			}
		case t.text == "," && depth == 1:
			defs = append(defs, cur)
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	return nil, 0, errors.New("column list is not closed")
}

// constraintStart are the words after which a column definition's type
// name has ended.
var constraintStart = map[string]bool{
	"CONSTRAINT": true, "PRIMARY": true, "NOT": true, "NULL": true, "UNIQUE": true, "CHECK": true,
	"DEFAULT": true, "COLLATE": true, "REFERENCES": true, "GENERATED": true, "AS": true,
}

// tableConstraint are the words that start a table constraint rather
// than a column.
var tableConstraint = map[string]bool{"CONSTRAINT": true, "PRIMARY": true, "UNIQUE": true, "CHECK": true, "FOREIGN": true}

func columnDef(d []token) (column, bool) {
	if len(d) == 0 || (!d[0].quoted && tableConstraint[strings.ToUpper(d[0].text)]) {
		return column{}, false
	}
	c := column{Name: d[0].text}
	j := 1
	var typ []string
	for ; j < len(d) && (d[j].quoted || !constraintStart[strings.ToUpper(d[j].text)]); j++ {
		typ = append(typ, d[j].text)
	}
	c.Type = strings.Join(typ, " ")
	generated, stored := false, false
	depth := 0
	for k := j; k < len(d); k++ {
		w := strings.ToUpper(d[k].text)
		if d[k].quoted {
			continue
		}
		switch {
		case w == "(":
			depth++
		case w == ")":
			depth--
		case depth > 0:
		case w == "NOT" && k+1 < len(d) && strings.EqualFold(d[k+1].text, "NULL"):
			c.NotNull = true
		case w == "PRIMARY" && k+1 < len(d) && strings.EqualFold(d[k+1].text, "KEY"):
			// Only exactly INTEGER makes the column the rowid, and not
			// with DESC (a quirk SQLite keeps for compatibility).
			desc := k+2 < len(d) && strings.EqualFold(d[k+2].text, "DESC")
			c.RowidKey = strings.EqualFold(c.Type, "INTEGER") && !desc
		case w == "GENERATED" || w == "AS":
			generated = true
		case w == "STORED":
			stored = true
		}
	}
	if generated && !stored {
		return column{}, false
	}
	return c, true
}

type token struct {
	text   string
	quoted bool // an identifier or string in quotes: never a keyword
}

// tokenize splits SQL into words, punctuation and quoted names, dropping
// comments. It needs only what a column list can hold.
func tokenize(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return out, nil
			}
			i += end + 4
		case c == '"' || c == '`' || c == '\'' || c == '[':
			closeq := c
			if c == '[' {
				closeq = ']'
			}
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, errors.New("unterminated quote")
				}
				if s[j] == closeq {
					if closeq != ']' && j+1 < len(s) && s[j+1] == closeq {
						b.WriteByte(closeq)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			out = append(out, token{text: b.String(), quoted: true})
			i = j + 1
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			out = append(out, token{text: s[i:j]})
			i = j
		default:
			out = append(out, token{text: s[i : i+1]})
			i++
		}
	}
	return out, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}
