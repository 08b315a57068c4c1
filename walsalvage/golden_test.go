package walsalvage

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

var update = flag.Bool("update", false, "regenerate testdata/walsalvage/ from real SQLite writes (see gen_test.go)")

var goldenCases = []string{
	"big-endian", "freed-pages", "main-gone", "old-salt", "overflow", "overflow-missing",
	"torn-last-frame", "uncommitted-tail", "v31-mismatched-main",
}

const goldenDir = "testdata/walsalvage"

// TestGolden salvages every case's WAL (with its main, if it has one) and
// checks the result against want.json, the message rows against what the
// writer acknowledged (acks.tsv, exactly: no row missing, none invented),
// and, where every page is in the WAL, against SQLite's own reading.
func TestGolden(t *testing.T) {
	if *update {
		writeGoldenInputs(t, makeGoldenInputs(t))
	}
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatalf("%v (run with -update to create the golden files)", err)
	}
	var found []string
	for _, e := range entries {
		found = append(found, e.Name())
	}
	if !slices.Equal(found, goldenCases) {
		t.Fatalf("cases in %s: %v, want %v", goldenDir, found, goldenCases)
	}
	for _, c := range goldenCases {
		t.Run(c, func(t *testing.T) {
			dir := filepath.Join(goldenDir, c)
			res := salvageCase(t, dir)
			got := resultJSON(t, res)
			if *update {
				if err := os.WriteFile(filepath.Join(dir, "want.json"), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := readFile(t, filepath.Join(dir, "want.json"))
			if !bytes.Equal(got, want) {
				t.Errorf("salvage of %s differs from want.json:\n%s", dir, firstDiff(got, want))
			}
			checkAcks(t, res, readAcks(t, filepath.Join(dir, "acks.tsv")))
			if _, err := os.Stat(filepath.Join(dir, "self-contained")); err == nil {
				checkAgainstSQLite(t, dir, res)
			}
		})
	}
}

// The inputs are stored gzipped: a WAL is mostly zeroes, and the eight
// cases take 60 KiB instead of 2 MiB.
const (
	walFile  = "state.db-wal.gz"
	mainFile = "state.db.gz"
)

func salvageCase(t *testing.T, dir string) *Result {
	t.Helper()
	wal := readGz(t, filepath.Join(dir, walFile))
	var opts Options
	if _, err := os.Stat(filepath.Join(dir, mainFile)); err == nil {
		m := readGz(t, filepath.Join(dir, mainFile))
		opts = Options{Main: bytes.NewReader(m), MainSize: int64(len(m))}
	}
	res, err := Salvage(context.Background(), bytes.NewReader(wal), int64(len(wal)), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readGz(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := z.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func resultJSON(t *testing.T, res *Result) []byte {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

// checkAcks: the salvaged messages are exactly the acknowledged rows,
// with their ids, sessions, contents and timestamps.
func checkAcks(t *testing.T, res *Result, acks []ackRow) {
	t.Helper()
	var got []ackRow
	for _, m := range res.Messages {
		sid, _ := m.Text("session_id")
		content, _ := m.Text("content")
		ts := m.Values["timestamp"]
		if ts.Kind != Real {
			t.Errorf("row %d: timestamp %v, want a real", m.RowID, ts)
		}
		got = append(got, ackRow{ID: m.RowID, Session: sid, Timestamp: ts.Real, Content: content})
	}
	if !slices.Equal(got, acks) {
		t.Errorf("salvaged messages:\n%v\nacknowledged:\n%v", got, acks)
	}
}

func writeGoldenInputs(t *testing.T, inputs map[string]goldenInput) {
	if err := os.RemoveAll(goldenDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range goldenCases {
		in, ok := inputs[c]
		if !ok {
			t.Fatalf("no input made for case %s", c)
		}
		dir := filepath.Join(goldenDir, c)
		files := map[string][]byte{walFile: gz(t, in.wal), "acks.tsv": acksTSV(in.acks)}
		if in.main != nil {
			files[mainFile] = gz(t, in.main)
		}
		if in.selfContained {
			files["self-contained"] = []byte("every page of this database is in the WAL: SQLite can read it over a zeroed main\n")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// acks.tsv: id, session, timestamp (shortest round-trip), content.
func acksTSV(acks []ackRow) []byte {
	var b bytes.Buffer
	for _, a := range acks {
		fmt.Fprintf(&b, "%d\t%s\t%s\t%s\n", a.ID, a.Session, strconv.FormatFloat(a.Timestamp, 'g', -1, 64), a.Content)
	}
	return b.Bytes()
}

func readAcks(t *testing.T, path string) []ackRow {
	t.Helper()
	var out []ackRow
	for _, line := range strings.Split(strings.TrimSuffix(string(readFile(t, path)), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) != 4 {
			t.Fatalf("%s: bad line %q", path, line)
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		ts, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: bad line %q", path, line)
		}
		out = append(out, ackRow{ID: id, Session: f[1], Timestamp: ts, Content: f[3]})
	}
	return out
}

// checkAgainstSQLite opens the case's WAL with SQLite over a main of
// zeroes as long as the database (every page is read from the WAL) and
// compares its messages with the salvage's.
func checkAgainstSQLite(t *testing.T, dir string, res *Result) {
	t.Helper()
	tmp := t.TempDir()
	db := filepath.Join(tmp, "state.db")
	wal := readGz(t, filepath.Join(dir, walFile))
	w := mustReadWAL(t, wal)
	if err := os.WriteFile(db, make([]byte, int(w.DatabasePages())*w.PageSize()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db+"-wal", wal, 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.Query(`SELECT id, session_id, timestamp, content FROM messages ORDER BY id`)
	if err != nil {
		t.Fatalf("SQLite cannot read the WAL of %s: %v", dir, err)
	}
	defer rows.Close()
	var want []ackRow
	for rows.Next() {
		var a ackRow
		if err := rows.Scan(&a.ID, &a.Session, &a.Timestamp, &a.Content); err != nil {
			t.Fatal(err)
		}
		want = append(want, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	checkAcks(t, res, want)
}

func mustReadWAL(t *testing.T, wal []byte) *WAL {
	t.Helper()
	w, err := ReadWAL(context.Background(), bytes.NewReader(wal), int64(len(wal)))
	if err != nil {
		t.Fatal(err)
	}
	return w
}
