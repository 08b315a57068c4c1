//go:build linux

package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// A healthy store is restored online: pages copied into the same inode,
// a safety copy of what it held first, the backup and its directory left
// as they were, the private copy removed.
func TestRestoreOnline(t *testing.T) {
	db := newStore(t, map[string]int{"s1": 4})
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)
	addMessages(t, db, map[string]int{"s2": 6})
	backupDir := hermestest.DirState(t, filepath.Dir(backup))
	ino := inodeOf(t, db)

	p, tmp, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != RestoreOnline || p.TargetState != "healthy" || p.Before != (Counts{2, 10}) || p.BackupRows != (Counts{1, 4}) {
		t.Fatalf("plan = %+v", p)
	}
	res, err := p.Execute(context.Background(), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.After != (Counts{1, 4}) || res.Before != (Counts{2, 10}) || res.Integrity != "ok" {
		t.Fatalf("result = %+v", res)
	}
	if res.MainAfter != res.MainBefore || inodeOf(t, db) != ino {
		t.Fatalf("inode changed: %v -> %v", res.MainBefore, res.MainAfter)
	}
	want := filepath.Join(filepath.Dir(db), "state.db.pre-restore-20261001-072448")
	if len(res.SafetyCopy) != 1 || res.SafetyCopy[0] != want {
		t.Fatalf("safety copy = %v, want %s", res.SafetyCopy, want)
	}
	fi, err := os.Lstat(want)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("safety copy mode: %v %v", fi, err)
	}
	if got := rowCounts(t, want); got != (Counts{2, 10}) {
		t.Fatalf("safety copy holds %v, want the store as it was", got)
	}
	if got := rowCounts(t, db); got != (Counts{1, 4}) {
		t.Fatalf("store holds %v after the restore", got)
	}
	integrityOK(t, db)
	if _, err := os.Stat(want + partialSuffix); !os.IsNotExist(err) {
		t.Fatalf("staging file left: %v", err)
	}
	if got := hermestest.DirState(t, filepath.Dir(backup)); got != backupDir {
		t.Fatalf("the backup's directory changed:\n%s\nwas\n%s", got, backupDir)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	emptyDir(t, tmp)

	// A second restore the same second gets its own safety copy.
	p2, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := p2.Execute(context.Background(), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.SafetyCopy) != 1 || res2.SafetyCopy[0] != want+"-2" {
		t.Fatalf("second safety copy = %v", res2.SafetyCopy)
	}
}

// A live writer, stopped through Writers for the restore and resumed
// after it, goes on writing into the restored store: its next row gets
// the id after the backup's last one, so it saw the restored rows.
func TestRestoreOnlineLiveWriter(t *testing.T) {
	db := newStore(t, nil)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 400})
	w.WaitAcks(t, 20)
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)
	backupRows := rowCounts(t, backup)
	w.WaitAcks(t, int(backupRows.Messages)+40) // the store is now ahead

	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	ino := inodeOf(t, db)
	sw := &sigWriters{t: t, pids: []int{w.Pid}}
	res, err := p.Execute(context.Background(), RestoreOptions{Writers: sw})
	if err != nil {
		t.Fatal(err)
	}
	if res.After != backupRows || res.MainAfter != res.MainBefore || inodeOf(t, db) != ino {
		t.Fatalf("result %+v, backup %v", res, backupRows)
	}
	if hermestest.StateOf(w.Pid) != 'T' {
		t.Fatalf("writer state %c after Execute, want stopped until the caller releases it", hermestest.StateOf(w.Pid))
	}
	if got := rowCounts(t, res.SafetyCopy[0]); got.Messages <= backupRows.Messages {
		t.Fatalf("safety copy holds %v, the store was ahead of the backup", got)
	}
	nAcks := len(w.Acks(t))
	if err := sw.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.WaitAcks(t, nAcks+20)
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	integrityOK(t, db)
	checkWriterSawRestore(t, db, backup, w.Acks(t))
	t.Logf("lock retries %d, stops %d", res.LockRetries, sw.stops)
}

// checkWriterSawRestore: the first row the writer committed after the
// restore has the id after the backup's highest, and every row it
// acknowledged from then on is in the store, which holds nothing else
// beyond the backup's rows.
func checkWriterSawRestore(t *testing.T, db, backup string, acks []hermestest.Ack) {
	t.Helper()
	c, err := store.OpenReadOnly(backup)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	err = c.QueryRow("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").Scan(&seq)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The writer's rows before the restore went through the same ids, so
	// the first row after it is the last ack with that id.
	first := -1
	for i, a := range acks {
		if a.ID == seq+1 {
			first = i
		}
	}
	if first < 0 {
		t.Fatalf("no acknowledged row got id %d (the backup's last is %d): the writer did not continue on the restored store", seq+1, seq)
	}
	after := acks[first:]
	r, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msgs, err := store.ReadMessages(context.Background(), r, "s1")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]store.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for _, a := range after {
		m, ok := byID[a.ID]
		if !ok || m.Content.String != hermestest.MessageContent("s1", a.Seq) {
			t.Fatalf("acknowledged seq %d (id %d) missing from the restored store", a.Seq, a.ID)
		}
	}
	if want := rowCounts(t, backup).Messages + int64(len(after)); int64(len(msgs)) != want {
		t.Fatalf("store has %d messages, want the backup's plus the %d written after the restore = %d", len(msgs), len(after), want)
	}
	var count int64
	if err := r.QueryRow("SELECT message_count FROM sessions WHERE id = 's1'").Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != int64(len(msgs)) {
		t.Fatalf("sessions.message_count %d, rows %d: the writer's counter update did not see the restored row", count, len(msgs))
	}
}

// A missing store is published: no safety copy (nothing to copy), no
// clear scan needed (nothing can be orphaned), mode 0600, no staging
// file left.
func TestRestorePublishMissing(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 3})
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	db := filepath.Join(dir, "state.db")
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != RestorePublish || p.TargetState != "missing" || p.NeedsClear() {
		t.Fatalf("plan = %+v", p)
	}
	res, err := p.Execute(context.Background(), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.After != (Counts{1, 3}) || len(res.SafetyCopy) != 0 || res.Integrity != "ok" {
		t.Fatalf("result = %+v", res)
	}
	fi, err := os.Lstat(db)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("published store: %v %v", fi, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".restore-") {
			t.Fatalf("staging file left: %s", e.Name())
		}
	}
	var mode string
	c, _ := store.OpenReadOnly(db)
	defer c.Close()
	if err := c.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("published store journal mode %q %v, want wal like every Hermes store", mode, err)
	}
}

// A broken store with leftover sidecars is replaced only with a clear
// scan; without one nothing changes. With one, the broken main and its
// -wal are kept byte for byte as the safety copy.
func TestRestorePublishBroken(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 3})
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	db := filepath.Join(dir, "state.db")
	for name, data := range map[string]string{"state.db": "this is not a database, it was damaged", "state.db-wal": "old wal bytes", "state.db-shm": "old shm"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := hermestest.DirState(t, dir)
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != RestorePublish || p.TargetState != "broken: no SQLite header" || len(p.Sidecars) != 2 || !p.NeedsClear() {
		t.Fatalf("plan = %+v", p)
	}
	_, err = p.Execute(context.Background(), RestoreOptions{})
	var ref *RefusedError
	if !errors.As(err, &ref) || !errors.Is(err, ErrRestoreRefused) {
		t.Fatalf("without a clear scan: %v, want a refusal", err)
	}
	if got := hermestest.DirState(t, dir); got != before {
		t.Fatalf("a refused restore changed the directory:\n%s\nwas\n%s", got, before)
	}

	res, err := p.Execute(context.Background(), RestoreOptions{Clear: true})
	if err != nil {
		t.Fatal(err)
	}
	copyMain := filepath.Join(dir, "state.db.pre-restore-20261001-072448")
	if len(res.SafetyCopy) != 2 || res.SafetyCopy[0] != copyMain || res.SafetyCopy[1] != copyMain+"-wal" {
		t.Fatalf("safety copy = %v", res.SafetyCopy)
	}
	if string(fileBytes(t, copyMain)) != "this is not a database, it was damaged" || string(fileBytes(t, copyMain+"-wal")) != "old wal bytes" {
		t.Fatal("safety copy differs from what was there")
	}
	if len(res.RemovedSidecars) != 2 || res.After != (Counts{1, 3}) {
		t.Fatalf("result = %+v", res)
	}
	integrityOK(t, db)
}

// Leftover sidecars next to a missing main need a clear scan too.
func TestRestorePublishLeftoverSidecarsRefused(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 1})
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	if err := os.WriteFile(filepath.Join(dir, "state.db-wal"), []byte("frames of a deleted store"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := hermestest.DirState(t, dir)
	p, _, err := planIn(t, backup, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Execute(context.Background(), RestoreOptions{}); !errors.Is(err, ErrRestoreRefused) || !strings.Contains(err.Error(), "state.db-wal") {
		t.Fatalf("got %v", err)
	}
	if got := hermestest.DirState(t, dir); got != before {
		t.Fatalf("directory changed:\n%s", got)
	}
}

// Bad backups and a missing directory are clear errors, and nothing is
// changed: not the store, not the backup's directory, no private copy
// left behind.
func TestRestoreRefusesBadInput(t *testing.T) {
	good := newStore(t, map[string]int{"s1": 2})
	okBackup := filepath.Join(t.TempDir(), "good.db")
	hermestest.VacuumInto(t, good, okBackup)
	db := newStore(t, map[string]int{"live": 5})
	bdir := t.TempDir()

	write := func(name string, data []byte) string {
		p := filepath.Join(bdir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := fileBytes(t, okBackup)
	for i := 4096 + 100; i < len(corrupt) && i < 4096*4; i++ {
		corrupt[i] = 0xA5 // page 2 on: b-tree pages turned to noise
	}
	// An index that does not match its table: SQLite opens the file and
	// reads it, only integrity_check finds the damage.
	badIndex := filepath.Join(bdir, "badindex.db")
	hermestest.VacuumInto(t, okBackup, badIndex)
	hermestest.ExecSQL(t, badIndex, `PRAGMA writable_schema=ON;
		UPDATE sqlite_master SET sql = 'CREATE INDEX idx_messages_session ON messages(role, timestamp)' WHERE name = 'idx_messages_session'`)
	link := filepath.Join(bdir, "link.db")
	if err := os.Symlink(okBackup, link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(bdir, "plain.db")
	hermestest.ExecSQL(t, plain, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('x')")

	cases := []struct {
		name, backup, target, want string
	}{
		{"symlink", link, db, "is a symlink (to " + okBackup},
		{"not sqlite", write("notes.txt", []byte("just some text, certainly not SQLite")), db, "not a SQLite database"},
		{"empty", write("empty.db", nil), db, "is empty"},
		{"corrupt", write("corrupt.db", corrupt), db, "malformed"},
		{"index mismatch", badIndex, db, "fails integrity_check"},
		{"not hermes", plain, db, "not a Hermes store"},
		{"missing", filepath.Join(bdir, "nope.db"), db, "does not exist"},
		{"no directory", okBackup, filepath.Join(t.TempDir(), "gone", "state.db"), "directory"},
	}
	storeBefore := hermestest.DirState(t, filepath.Dir(db))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bBefore := hermestest.DirState(t, bdir)
			p, tmp, err := planIn(t, tc.backup, tc.target)
			if err == nil {
				t.Fatalf("planned %+v, want an error", p)
			}
			if tc.name != "no directory" && !errors.Is(err, ErrBackupInvalid) {
				t.Fatalf("%v does not wrap ErrBackupInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			t.Logf("%s: %v", tc.name, err)
			emptyDir(t, tmp)
			if got := hermestest.DirState(t, bdir); got != bBefore {
				t.Fatalf("the backups' directory changed:\n%s", got)
			}
		})
	}
	if got := hermestest.DirState(t, filepath.Dir(db)); got != storeBefore {
		t.Fatalf("the store's directory changed:\n%s\nwas\n%s", got, storeBefore)
	}
}

// A healthy SQLite file that is not a Hermes store, or not WAL, is not
// overwritten.
func TestRestoreRefusesForeignTarget(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 1})
	for _, mode := range []string{"wal", "delete"} {
		dir, _ := filepath.EvalSymlinks(t.TempDir())
		db := filepath.Join(dir, "state.db")
		hermestest.ExecSQL(t, "file:"+db+"?_pragma=journal_mode("+mode+")", "CREATE TABLE ledger (id INTEGER PRIMARY KEY)")
		before := hermestest.DirState(t, dir)
		_, _, err := planIn(t, backup, db)
		want := map[string]string{"wal": "not a Hermes store", "delete": "rollback-journal mode"}[mode]
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", mode, err, want)
		}
		if got := hermestest.DirState(t, dir); got != before {
			t.Fatalf("%s: directory changed", mode)
		}
	}
}

// The backup API cannot copy into a WAL store of another page size; the
// private copy is converted first.
func TestRestorePageSizeDiffers(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 7})
	hermestest.ExecSQL(t, backup, "PRAGMA journal_mode=DELETE", "PRAGMA page_size=8192", "VACUUM")
	db := newStore(t, map[string]int{"other": 2})
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Execute(context.Background(), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.After != (Counts{1, 7}) {
		t.Fatalf("after = %v", res.After)
	}
	r, _ := store.OpenReadOnly(db)
	defer r.Close()
	var ps int
	if err := r.QueryRow("PRAGMA page_size").Scan(&ps); err != nil || ps != 4096 {
		t.Fatalf("page size %d %v", ps, err)
	}
}

// A store replaced between planning and executing is not touched.
func TestRestoreTargetChangedSincePlan(t *testing.T) {
	backup := backupOf(t, map[string]int{"s1": 1})
	db := newStore(t, map[string]int{"s2": 2})
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t, map[string]int{"s3": 3})
	for _, suffix := range []string{"", "-wal", "-shm"} {
		// The whole generation, so the test does not mispair it.
		if err := os.Rename(other+suffix, db+suffix); os.IsNotExist(err) {
			if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Execute(context.Background(), RestoreOptions{}); !errors.Is(err, ErrTargetChanged) {
		t.Fatalf("got %v, want ErrTargetChanged", err)
	}
	if got := rowCounts(t, db); got != (Counts{1, 3}) {
		t.Fatalf("the new store was changed: %v", got)
	}
}

// The store's directory swapped for another between the plan and the
// execution (renamed away, a look-alike put in its place): the restore is
// refused and writes nothing into either.
func TestRestoreRefusesASwappedDirectory(t *testing.T) {
	db := newStore(t, map[string]int{"s1": 4})
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(db)
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The same main file (same inode) moved into the look-alike, so only
	// the directory tells them apart.
	for _, n := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		if err := os.Rename(filepath.Join(dir+".real", n), filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	before, real := hermestest.DirState(t, dir), hermestest.DirState(t, dir+".real")
	_, err = p.Execute(context.Background(), RestoreOptions{})
	if !errors.Is(err, store.ErrDirChanged) {
		t.Fatalf("restore into a swapped directory: %v, want a changed-directory error", err)
	}
	if after := hermestest.DirState(t, dir); after != before {
		t.Fatalf("look-alike directory changed: %v -> %v", before, after)
	}
	if after := hermestest.DirState(t, dir+".real"); after != real {
		t.Fatalf("planned directory changed: %v -> %v", real, after)
	}
}

// The store's directory swapped for a look-alike holding the same files
// between the plan's directory check and its look at the target: the
// target is not classified (nor opened by SQLite) in the look-alike; the
// plan is refused. By name (before), classifyTarget read the look-alike's
// files as the store's and planned on them.
func TestRestorePlanRefusesADirectorySwappedBeforeClassify(t *testing.T) {
	db := newStore(t, map[string]int{"s1": 4})
	dir := filepath.Dir(db)
	p := &RestorePlan{Target: db, dir: dir, base: filepath.Base(db), now: time.Now}
	if err := p.checkDir(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		if err := os.Rename(filepath.Join(dir+".real", n), filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	before := hermestest.DirState(t, dir)
	if err := p.classifyTarget(context.Background()); !errors.Is(err, store.ErrDirChanged) {
		t.Fatalf("classify in a swapped directory: %v (mode %v, target %q), want a changed-directory error", err, p.Mode, p.TargetState)
	}
	if after := hermestest.DirState(t, dir); after != before {
		t.Fatalf("look-alike directory changed: %v -> %v", before, after)
	}
}

// The safety copy reads the live store only through a connection opened
// inside store.OpenSQLiteIn's checks: with state.db swapped for a symlink
// to another user's store after the restore opened the directory, no copy
// of that store lands in this directory. By name (before), SQLite
// followed the link and the safety copy held the other store's rows.
func TestRestoreSafetyCopyReadsOnlyThePlannedStore(t *testing.T) {
	db := newStore(t, map[string]int{"s1": 4})
	other := newStore(t, map[string]int{"b1": 7})
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)
	p, _, err := planIn(t, backup, db)
	if err != nil {
		t.Fatal(err)
	}
	d, err := openStoreDir(p.dir, p.dirID)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := os.Rename(db, db+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, db); err != nil {
		t.Fatal(err)
	}
	copies, err := p.onlineSafetyCopy(context.Background(), d)
	for _, c := range copies {
		if n := rowCounts(t, c); n.Messages != 4 {
			t.Errorf("safety copy %s has %d messages, want alice's 4 (7 are the other store's)", c, n.Messages)
		}
	}
	if err == nil {
		t.Fatalf("safety copy with %s a symlink to %s: no error (copies %v)", db, other, copies)
	}
}
