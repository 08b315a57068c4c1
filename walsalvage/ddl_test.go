package walsalvage

import (
	"reflect"
	"testing"
)

func TestParseCreateTable(t *testing.T) {
	cases := []struct {
		sql          string
		name         string
		cols         []column
		withoutRowid bool
	}{
		{
			sql:  `CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id), timestamp REAL NOT NULL, x DEFAULT (strftime('%s', 'now')), CHECK (timestamp > 0))`,
			name: "messages",
			cols: []column{{Name: "id", Type: "INTEGER", RowidKey: true}, {Name: "session_id", Type: "TEXT", NotNull: true},
				{Name: "timestamp", Type: "REAL", NotNull: true}, {Name: "x"}},
		},
		{
			// Quoted names, a comment, a type with arguments, a table
			// constraint, a virtual generated column (not stored) and a
			// stored one.
			sql: "CREATE TABLE \"main\".\"odd table\" (\n -- the key\n [select] varchar(20) NOT NULL, `b c` INT PRIMARY KEY, \"d\"\"e\" TEXT, " +
				"v INTEGER GENERATED ALWAYS AS (1) VIRTUAL, s INTEGER AS (2) STORED, PRIMARY KEY (\"b c\"))",
			name: "odd table",
			cols: []column{{Name: "select", Type: "varchar ( 20 )", NotNull: true}, {Name: "b c", Type: "INT"},
				{Name: `d"e`, Type: "TEXT"}, {Name: "s", Type: "INTEGER"}},
		},
		{
			sql:          `CREATE TABLE kv (k TEXT PRIMARY KEY, v) WITHOUT ROWID`,
			name:         "kv",
			cols:         []column{{Name: "k", Type: "TEXT"}, {Name: "v"}},
			withoutRowid: true,
		},
		{
			// PRIMARY KEY DESC does not make an INTEGER column the rowid.
			sql:  `CREATE TABLE t (a INTEGER PRIMARY KEY DESC, b)`,
			name: "t",
			cols: []column{{Name: "a", Type: "INTEGER"}, {Name: "b"}},
		},
	}
	for _, c := range cases {
		name, cols, wr, err := parseCreateTable(c.sql)
		if err != nil || name != c.name || wr != c.withoutRowid || !reflect.DeepEqual(cols, c.cols) {
			t.Errorf("%s:\n got %q %+v %v %v\nwant %q %+v %v", c.sql, name, cols, wr, err, c.name, c.cols, c.withoutRowid)
		}
	}
	for _, bad := range []string{"", "CREATE INDEX i ON t(a)", "CREATE TABLE t", "CREATE TABLE t (a", "CREATE TABLE t ('a", "CREATE TABLE t ()"} {
		if _, _, _, err := parseCreateTable(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAffinity(t *testing.T) {
	for typ, want := range map[string]affinity{
		"INTEGER": affInteger, "BIGINT": affInteger, "TEXT": affText, "VARCHAR(20)": affText, "CLOB": affText,
		"": affBlob, "BLOB": affBlob, "REAL": affReal, "DOUBLE PRECISION": affReal, "FLOAT": affReal,
		"NUMERIC": affNumeric, "DECIMAL(10,5)": affNumeric, "BOOLEAN": affNumeric,
		// SQLite's rule order: INT wins over the rest ("POINT" is INTEGER).
		"FLOATING POINT": affInteger,
	} {
		if got := affinityOf(typ); got != want {
			t.Errorf("affinity of %q = %d, want %d", typ, got, want)
		}
	}
}

func TestBuiltinLayoutsParse(t *testing.T) {
	for _, l := range builtinLayouts() {
		if l.min == 0 || len(l.Columns) < l.min {
			t.Errorf("layout %s/%s: min %d of %d columns", l.Table, l.Source, l.min, len(l.Columns))
		}
	}
}
