package walsalvage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestSalvageMatchesSQLite writes rows that exercise every serial type
// (integers of each width, reals, whole reals SQLite stores as integers,
// 0 and 1, text in several scripts, blobs, NULL) and payloads on both
// sides of every local-size threshold, then checks that every column of
// every salvaged row is what SQLite itself returns for it, class and
// value.
func TestSalvageMatchesSQLite(t *testing.T) {
	s := newSQLiteStore(t, false, true)
	ints := []int64{0, 1, -1, 127, 128, -129, 32767, 32768, 1 << 23, -(1 << 23) - 1, 1<<31 - 1, 1 << 31,
		1 << 47, -(1 << 47) - 1, 1 << 48, math.MaxInt64, math.MinInt64}
	for i, n := range ints {
		s.exec(`INSERT INTO messages (session_id, role, content, timestamp, token_count, display_identity, observed)
			VALUES ('s1', 'assistant', ?, ?, ?, ?, ?)`, fmt.Sprintf("int %d ünïcödé 漢字 🙂", n), 1700000000+float64(i)*0.5, n, []byte{byte(i), 0, 0xff}, i%3)
	}
	// A whole timestamp is stored as an integer in a REAL column.
	s.exec(`INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', 'whole', 1700000500)`)
	u := 4096
	x := u - 35
	m := (u-12)*32/255 - 23
	for _, size := range []int{x - 40, x - 1, x, x + 1, x + 40, m + u - 4 - 60, 2*u + 17, 3*(u-4) + m, 5 * u} {
		s.exec(`INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'tool', ?, 1700000600)`, strings.Repeat("z", size))
	}
	res, err := Salvage(context.Background(), bytes.NewReader(s.wal()), int64(len(s.wal())), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Unrecoverable != (TableCounts{}) || len(res.Report.Losses) > 0 {
		t.Fatalf("losses in a WAL that has every page: %+v", res.Report.Losses)
	}
	want := sqliteRows(t, s.db, "messages")
	if len(res.Messages) != len(want) {
		t.Fatalf("salvaged %d messages, SQLite has %d", len(res.Messages), len(want))
	}
	for i, row := range res.Messages {
		compareRow(t, row, want[i])
	}
	ws := sqliteRows(t, s.db, "sessions")
	if len(res.Sessions) != 1 || len(ws) != 1 {
		t.Fatalf("sessions: salvaged %d, SQLite %d", len(res.Sessions), len(ws))
	}
	compareRow(t, res.Sessions[0], ws[0])
}

// sqliteRows reads every column of every row as the driver returns it,
// with rowid first.
func sqliteRows(t *testing.T, db *sql.DB, table string) []map[string]any {
	t.Helper()
	return hermestest.QueryRows(t, db, "SELECT rowid AS __rowid, * FROM "+table+" ORDER BY rowid")
}

func compareRow(t *testing.T, got Row, want map[string]any) {
	t.Helper()
	if got.RowID != want["__rowid"].(int64) {
		t.Errorf("rowid %d, SQLite %v", got.RowID, want["__rowid"])
	}
	var names []string
	for c := range want {
		if c != "__rowid" {
			names = append(names, c)
		}
	}
	slices.Sort(names)
	for _, c := range names {
		v, ok := got.Values[c]
		if !ok {
			t.Errorf("row %d: no column %s", got.RowID, c)
			continue
		}
		if g, w := v.Any(), want[c]; fmt.Sprintf("%T %v", g, g) != fmt.Sprintf("%T %v", w, w) {
			t.Errorf("row %d column %s: salvaged %T %s, SQLite %T %s", got.RowID, c, g, short(g), w, short(w))
		}
	}
	if len(got.Values) != len(names) {
		t.Errorf("row %d: %d columns salvaged, SQLite has %d", got.RowID, len(got.Values), len(names))
	}
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
