package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// fixture is a profile with one writer slot whose ack file and store the
// test writes by hand, so every count of checkProfile has a known answer.
type fixture struct {
	t    *testing.T
	p    *profile
	slot *writerSlot
	db   *sql.DB
	ack  *os.File
	seen *ackWatch
	base time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	p := &profile{name: "default", dir: dir, db: filepath.Join(dir, "state.db")}
	if err := hermestest.CreateStore(p.db); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", hermestest.DSN(p.db))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`INSERT INTO sessions (id, source, model, started_at) VALUES ('s', 'cli', 'm', 0)`); err != nil {
		t.Fatal(err)
	}
	ackPath := filepath.Join(dir, "s.ack")
	ack, err := os.Create(ackPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ack.Close() })
	slot := &writerSlot{name: "s", p: p, opts: hermestest.WriterOptions{Ack: ackPath}}
	return &fixture{t: t, p: p, slot: slot, db: db, ack: ack, seen: newAckWatch(), base: time.Unix(1_800_000_000, 0)}
}

// at is the fixture's clock: seconds after its base.
func (f *fixture) at(sec float64) time.Time {
	return f.base.Add(time.Duration(sec * float64(time.Second)))
}

// acked records seq as acknowledged at stamp sec, its ack seen at seenSec,
// and stores it copies times (0: not in the store).
func (f *fixture) acked(seq int64, sec, seenSec float64, copies int) {
	f.t.Helper()
	ts := float64(f.at(sec).UnixNano()) / 1e9
	for range copies {
		f.insert(seq, ts)
	}
	if _, err := fmt.Fprintf(f.ack, "s\t%d\t%s\t%d\n", seq, strconv.FormatFloat(ts, 'f', -1, 64), seq); err != nil {
		f.t.Fatal(err)
	}
	f.seen.seen[rowKey{session: "s", content: hermestest.MessageContent("s", seq), ts: ts}] = f.at(seenSec)
}

// replayedBack is acked, with the row in the store once, as a replay
// writes it: its display_metadata carries a recovery id.
func (f *fixture) replayedBack(seq int64, sec, seenSec float64) {
	f.t.Helper()
	f.acked(seq, sec, seenSec, 0)
	f.insertMeta(seq, float64(f.at(sec).UnixNano())/1e9, `{"diverted_recovery_id": "0123abcd"}`)
}

func (f *fixture) insert(seq int64, ts float64) {
	f.t.Helper()
	f.insertMeta(seq, ts, "")
}

func (f *fixture) insertMeta(seq int64, ts float64, meta string) {
	f.t.Helper()
	if _, err := f.db.Exec(`INSERT INTO messages (session_id, role, content, timestamp, display_metadata) VALUES ('s', 'user', ?, ?, NULLIF(?, ''))`,
		hermestest.MessageContent("s", seq), ts, meta); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.db.Exec(`UPDATE sessions SET message_count = message_count + 1 WHERE id = 's'`); err != nil {
		f.t.Fatal(err)
	}
}

// backup writes a store holding seqs (stamped as acked) and records a
// restore of it at restoreSec, taken at backupSec.
func (f *fixture) backup(backupSec, restoreSec float64, rows map[int64]float64) {
	f.t.Helper()
	f.toolRestore(backupSec, restoreSec, restoreSec, rows)
}

// toolRestore is backup, with a restore tool that ran from startSec to
// doneSec (a rename has startSec == doneSec).
func (f *fixture) toolRestore(backupSec, startSec, doneSec float64, rows map[int64]float64) {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "backup.db")
	if err := hermestest.CreateStore(path); err != nil {
		f.t.Fatal(err)
	}
	db, err := sql.Open("sqlite", hermestest.DSN(path))
	if err != nil {
		f.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO sessions (id, source, model, started_at) VALUES ('s', 'cli', 'm', 0)`); err != nil {
		f.t.Fatal(err)
	}
	for seq, sec := range rows {
		ts := float64(f.at(sec).UnixNano()) / 1e9
		if _, err := db.Exec(`INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', ?, ?)`,
			hermestest.MessageContent("s", seq), ts); err != nil {
			f.t.Fatal(err)
		}
	}
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		f.t.Fatal(err)
	}
	f.p.recordRestore(restore{Start: f.at(startSec), At: f.at(doneSec), Backup: path, BackupAt: f.at(backupSec), Kind: FaultCpInplace})
}

// check runs the final check; settled is the judge's answer for every
// backup, noticed its answer for every restore.
func (f *fixture) check(settled bool) ProfileReport {
	f.t.Helper()
	return f.checkWith(judge{
		settled: func(time.Time) bool { return settled },
		failed:  func(*writerSlot, time.Time) bool { return false },
		noticed: func(restore) bool { return false },
	})
}

func (f *fixture) checkWith(j judge) ProfileReport {
	f.t.Helper()
	if _, err := f.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		f.t.Fatal(err)
	}
	pr, err := checkProfile(f.p, []*writerSlot{f.slot}, f.seen, j, f.t.TempDir())
	if err != nil {
		f.t.Fatal(err)
	}
	return pr
}

// TestCheckProfileCounts pins down what the final check calls lost,
// duplicated, rolled back and replayed back around a restore at t=10 of a
// backup taken at t=8.
func TestCheckProfileCounts(t *testing.T) {
	f := newFixture(t)
	f.backup(8, 10, map[int64]float64{1: 1, 2: 2})
	f.acked(1, 1, 1.01, 1)      // in the backup and the store
	f.acked(2, 2, 2.01, 2)      // twice in the store: one duplicate
	f.acked(3, 3, 3.01, 0)      // acked before the backup, in no backup: lost earlier
	f.acked(4, 9, 9.01, 0)      // after the backup, before the restore: rolled back
	f.replayedBack(5, 9.5, 9.6) // rolled back, then replayed back in
	f.acked(6, 9.9, 10.2, 0)    // stamped before the restore, acked after it: rolled back
	f.acked(7, 11, 11.01, 1)    // after the restore: required, there
	f.acked(8, 12, 12.01, 0)    // after the restore: required, lost
	pr := f.check(true)
	want := ProfileReport{Acked: 8, Required: 2, Lost: 1, Duplicated: 1, RolledBack: 2, Resurrected: 1, LostEarlier: 1,
		AckedAfterRolledBack: 1, Integrity: "ok", Restores: 1}
	got := ProfileReport{Acked: pr.Acked, Required: pr.Required, Lost: pr.Lost, Duplicated: pr.Duplicated, RolledBack: pr.RolledBack,
		Resurrected: pr.Resurrected, LostEarlier: pr.LostEarlier, AckedAfterRolledBack: pr.AckedAfterRolledBack,
		Integrity: pr.Integrity, Restores: pr.Restores, Unverifiable: pr.Unverifiable}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts:\n got %+v\nwant %+v", got, want)
	}
	if pr.CountMismatch != 0 {
		t.Fatalf("message_count mismatches: %d", pr.CountMismatch)
	}
}

// TestCheckProfileUnverifiable: a backup taken while an incident was still
// replaying may lack rows acked before it; they are not called lost.
func TestCheckProfileUnverifiable(t *testing.T) {
	f := newFixture(t)
	f.backup(8, 10, nil)
	f.acked(1, 3, 3.01, 0)
	pr := f.check(false)
	if pr.LostEarlier != 0 || pr.Unverifiable != 1 {
		t.Fatalf("lost earlier %d, unverifiable %d; want 0 and 1", pr.LostEarlier, pr.Unverifiable)
	}
}

// TestCheckProfileCorruptFTS: an FTS5 index that no longer matches its
// messages is corruption, though PRAGMA integrity_check passes.
func TestCheckProfileCorruptFTS(t *testing.T) {
	f := newFixture(t)
	f.acked(1, 1, 1.01, 1)
	// An index entry for a row that does not exist, as a replay that
	// wrote the index but not the row would leave.
	if _, err := f.db.Exec(`INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (999, 'ghost', NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	if pr := f.check(true); pr.Integrity == "ok" {
		t.Fatal("a damaged messages_fts index passed the integrity check")
	}
}

// TestReadRowsDamaged: a store with one broken leaf page of messages
// cannot be read whole; readRowsDamaged still reads every other row.
func TestReadRowsDamaged(t *testing.T) {
	f := newFixture(t)
	const n = 2000
	// One transaction (the fixture's pool is one connection).
	if _, err := f.db.Exec("BEGIN"); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= n; seq++ {
		f.insert(seq, float64(seq))
	}
	if _, err := f.db.Exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	f.db.Close()
	b, err := os.ReadFile(f.p.db)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(b[16])<<8 | int(b[17])
	broken := -1
	for off := pageSize; off+pageSize <= len(b); off += pageSize {
		// A table b-tree leaf holding this writer's contents is a page of
		// messages (the FTS5 tables are external-content: no text).
		if b[off] == 0x0d && bytes.Contains(b[off:off+pageSize], []byte("msg s #1000")) {
			b[off] = 0xff // no valid page type
			broken = off / pageSize
			break
		}
	}
	if broken < 0 {
		t.Fatal("no leaf page of messages found")
	}
	if err := os.WriteFile(f.p.db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readRows(f.p.db); err == nil {
		t.Fatalf("readRows read a store whose page %d is broken", broken)
	}
	got, bad, err := readRowsDamaged(f.p.db)
	if err != nil {
		t.Fatal(err)
	}
	if bad == 0 || len(got.rows) == 0 || len(got.rows) >= n || len(got.rows) < n-2*256 {
		t.Fatalf("%d rows read, %d ranges unreadable; want all but the broken page's, at least one range unreadable", len(got.rows), bad)
	}
	if got.rows[rowKey{session: "s", content: hermestest.MessageContent("s", 1), ts: 1}] != 1 {
		t.Error("row 1, far from the broken page, not read")
	}
}

// TestReadRowsEmptySchema: a backup of a store with no schema yet (its
// first commits were in a -wal that was unlinked before any checkpoint)
// holds no rows; it is not a store the check cannot read (chaos seed 2
// reported "no such table: messages" for such a backup as a problem).
func TestReadRowsEmptySchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rows, err := readRows(path)
	if err != nil || len(rows.rows) != 0 || len(rows.sessions) != 0 {
		t.Fatalf("readRows of a schema-less store: %+v, %v; want no rows and no error", rows, err)
	}
	// A store that has tables but not Hermes' is still refused.
	db, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := readRows(path); err == nil {
		t.Fatal("readRows of a store without messages but with other tables: no error")
	}
}

// TestBackupDamage: the backup check is the verdict's (an FTS index that
// no longer matches its rows is damage, though quick_check passes), and a
// backup of a store with no schema yet is whole (the first check refused
// those ten times and the fault was not carried out).
func TestBackupDamage(t *testing.T) {
	f := newFixture(t)
	f.acked(1, 1, 1.01, 1)
	if _, err := f.db.Exec(`INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (999, 'ghost', NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	f.db.Close()
	if bad := backupDamage(context.Background(), f.p.db); bad == "" {
		t.Fatal("a backup with a damaged messages_fts index passed the check")
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	db, err := sql.Open("sqlite", "file:"+empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if bad := backupDamage(context.Background(), empty); bad != "" {
		t.Fatalf("a backup with no schema yet: %s", bad)
	}
}

// TestCheckProfileIncidentsNotRead: a run that could not read agentd's
// incidents (an interrupted one) knows neither whether a backup was
// taken mid-incident nor whether an incident saw a tool at work: a row
// missing from a backup and one missing after a tool are unverifiable, not
// lost. Through judgeFor, as the run uses it: before, both were lost (280
// "lost before a later restore" and 29 "lost with no incident" on seed 1).
func TestCheckProfileIncidentsNotRead(t *testing.T) {
	f := newFixture(t)
	f.backup(8, 10, nil)
	f.acked(1, 3, 3.01, 0) // acked before the backup, in none
	f.toolRestore(12, 14, 15, nil)
	f.acked(2, 14.5, 14.51, 0) // stamped while the tool ran, missing
	r := &run{agent: &agentProc{ups: []upInterval{{from: f.at(-100)}}}}
	pr := f.checkWith(r.judgeFor(f.p))
	if pr.LostEarlier != 0 || pr.DuringLost != 0 || pr.Unverifiable != 2 {
		t.Fatalf("lost earlier %d, lost while a tool wrote %d, unverifiable %d; want 0, 0, 2",
			pr.LostEarlier, pr.DuringLost, pr.Unverifiable)
	}
	r.incidentsRead = true // none opened: both are losses
	pr = f.checkWith(r.judgeFor(f.p))
	if pr.LostEarlier != 1 || pr.DuringLost != 1 {
		t.Fatalf("incidents read, none opened: lost earlier %d, lost while a tool wrote %d; want 1 and 1", pr.LostEarlier, pr.DuringLost)
	}
}
