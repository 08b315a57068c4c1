package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the only SQLite allowed

	"github.com/stateguard/stateguard/internal/hermestest"
)

// ProfileReport is the final check of one profile's healthy store.
type ProfileReport struct {
	Name        string
	Acked       int // rows acknowledged by its writers
	Required    int // acknowledged after its last restore: must be there once
	Lost        int // required rows missing
	Duplicated  int // extra copies of any row (same session, content, timestamp)
	RolledBack  int // stamped before the last restore and not there (allowed)
	Resurrected int // committed after a restore's backup, stamped before the restore, yet there (replayed back)
	// LostEarlier rows were acknowledged before some restore's backup
	// began, yet are neither in that backup, nor a later one, nor the
	// store: lost before the restore could hide the loss.
	LostEarlier        int
	LostEarlierSamples []string
	// AckedAfterRolledBack rows were stamped before the last restore but
	// acknowledged after it, and are not there (the agent's cut is by
	// timestamp; allowed, reported).
	AckedAfterRolledBack int
	// Unverifiable rows were acknowledged before a backup that was taken
	// while an incident of the store was unfinished (or agentd had just
	// started), are missing, and so cannot be told lost or rolled back.
	Unverifiable  int
	LastRestore   float64 // unix seconds; 0 without a restore
	Restores      int
	Integrity     string // "ok" or what integrity_check and the FTS5 checks said
	CountMismatch int    // sessions whose message_count differs from their rows
	Leftovers     []string
	LostSamples   []string // a few lost rows, for the report
}

// rowKey identifies a message row: the writer never writes two rows with
// the same session, content and timestamp, so two such rows are a
// duplicate. Assistant tool-call rows have no content; their tool_calls
// (unique per seq) stand in.
type rowKey struct {
	session, content string
	ts               float64
}

type storeRows struct {
	rows     map[rowKey]int
	sessions map[string][2]int // message_count, rows
}

// readRows reads every message of the store at path (a private copy).
func readRows(path string) (*storeRows, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := &storeRows{rows: map[rowKey]int{}, sessions: map[string][2]int{}}
	rs, err := db.Query(`SELECT session_id, content, tool_calls, timestamp FROM messages`)
	if err != nil {
		return nil, fmt.Errorf("read messages of %s: %w", path, err)
	}
	defer rs.Close()
	for rs.Next() {
		var s string
		var content, calls sql.NullString
		var ts float64
		if err := rs.Scan(&s, &content, &calls, &ts); err != nil {
			return nil, err
		}
		k := rowKey{session: s, content: content.String, ts: ts}
		if !content.Valid {
			k.content = "\x00calls:" + calls.String
		}
		out.rows[k]++
		c := out.sessions[s]
		c[1]++
		out.sessions[s] = c
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	ss, err := db.Query(`SELECT id, message_count FROM sessions`)
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	for ss.Next() {
		var id string
		var n int
		if err := ss.Scan(&id, &n); err != nil {
			return nil, err
		}
		c := out.sessions[id]
		c[0] = n
		out.sessions[id] = c
	}
	return out, ss.Err()
}

// privateCopy copies a quiescent store (main and -wal) to dir, so the
// checks can run writable FTS5 integrity commands and never create
// sidecars next to the real store.
func privateCopy(db, dir string) (string, error) {
	dst := filepath.Join(dir, "state.db")
	for _, suf := range []string{"", "-wal"} {
		if err := copyFile(db+suf, dst+suf); err != nil {
			if suf == "-wal" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return "", err
		}
	}
	return dst, nil
}

// integrity runs integrity_check and both FTS5 indexes' integrity-check on
// a private copy; "ok" or what failed.
func integrity(copyPath string) string {
	db, err := sql.Open("sqlite", "file:"+copyPath)
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	rs, err := db.Query("PRAGMA integrity_check")
	if err != nil {
		return "integrity_check: " + err.Error()
	}
	var msgs []string
	for rs.Next() {
		var m string
		_ = rs.Scan(&m)
		msgs = append(msgs, m)
	}
	rs.Close()
	if len(msgs) != 1 || msgs[0] != "ok" {
		return "integrity_check: " + strings.Join(msgs, "; ")
	}
	// messages_fts indexes every row, so its index must match the
	// messages table exactly (rank 1 compares against the content). The
	// trigram index skips tool rows and cron/subagent sessions by design,
	// which its integrity-check would call corruption.
	if _, err := db.Exec("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)"); err != nil {
		return "messages_fts integrity-check: " + err.Error()
	}
	return "ok"
}

// checkProfile compares the store with every ack of its writers.
// verifiable reports whether a backup taken at t must hold every row
// acknowledged before it: agentd had been up long enough to have seen any
// orphan, and no incident of the store was still on its way to replaying
// its rows (a backup taken then legitimately misses them).
type verifiable func(t time.Time) bool

// inFailed reports whether the row acknowledged at seen by a slot's
// writer was written by a holder of an incident that failed: its orphan
// was never captured, so a backup's lack of the row is a loss, not a
// pending replay.
type inFailed func(s *writerSlot, seen time.Time) bool

func checkProfile(p *profile, slots []*writerSlot, watch *ackWatch, settled verifiable, failed inFailed, work string) (ProfileReport, error) {
	pr := ProfileReport{Name: p.name}
	dir := filepath.Join(work, p.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pr, err
	}
	cp, err := privateCopy(p.db, dir)
	if err != nil {
		return pr, fmt.Errorf("copy %s: %w", p.db, err)
	}
	pr.Integrity = integrity(cp)
	got, err := readRows(cp)
	if err != nil {
		return pr, err
	}
	restores := p.allRestores()
	pr.Restores = len(restores)
	// backups[i] is the content of restore i's backup, read on demand.
	backups := make([]*storeRows, len(restores))
	backupRows := func(i int) (*storeRows, error) {
		if backups[i] != nil {
			return backups[i], nil
		}
		bdir := filepath.Join(dir, fmt.Sprintf("backup-%d", i))
		if err := os.MkdirAll(bdir, 0o700); err != nil {
			return nil, err
		}
		bcp, err := privateCopy(restores[i].Backup, bdir)
		if err != nil {
			return nil, fmt.Errorf("copy backup %s: %w", restores[i].Backup, err)
		}
		if backups[i], err = readRows(bcp); err != nil {
			return nil, fmt.Errorf("read backup %s: %w", restores[i].Backup, err)
		}
		return backups[i], nil
	}
	var last time.Time
	if len(restores) > 0 {
		last = restores[len(restores)-1].At
		pr.LastRestore = float64(last.UnixNano()) / 1e9
	}
	for _, n := range got.rows {
		if n > 1 {
			pr.Duplicated += n - 1
		}
	}
	for _, c := range got.sessions {
		if c[0] != c[1] {
			pr.CountMismatch++
		}
	}
	sample := func(l *[]string, a hermestest.Ack) {
		if len(*l) < 5 {
			*l = append(*l, fmt.Sprintf("%s seq %d ts %s", a.Session, a.Seq, strconv.FormatFloat(a.Timestamp, 'f', 6, 64)))
		}
	}
	for _, s := range slots {
		if s.p != p {
			continue
		}
		acks, err := hermestest.ReadAcks(s.opts.Ack)
		if err != nil {
			return pr, err
		}
		for _, a := range acks {
			pr.Acked++
			k := rowKey{session: a.Session, content: hermestest.MessageContent(a.Session, a.Seq), ts: a.Timestamp}
			n := got.rows[k]
			if a.Timestamp > pr.LastRestore {
				pr.Required++
				if n == 0 {
					pr.Lost++
					sample(&pr.LostSamples, a)
				}
				continue
			}
			// Stamped before the last restore: the first restore after
			// the row decides. A row committed (acked) before that
			// restore's backup began must be in the backup, or in a
			// later one, or in the store; otherwise it was lost before
			// the restore could hide it.
			i := sort.Search(len(restores), func(i int) bool { return float64(restores[i].At.UnixNano())/1e9 >= a.Timestamp })
			seen := watch.seenAt(k)
			if i < len(restores) && !seen.IsZero() && seen.Before(restores[i].BackupAt) && n == 0 {
				if !settled(restores[i].BackupAt) && !failed(s, seen) {
					pr.Unverifiable++
					pr.RolledBack++
					continue
				}
				found := false
				for j := i; j < len(restores) && !found; j++ {
					b, err := backupRows(j)
					if err != nil {
						return pr, err
					}
					found = b.rows[k] > 0
				}
				if !found {
					pr.LostEarlier++
					sample(&pr.LostEarlierSamples, a)
					continue
				}
			}
			if n == 0 {
				pr.RolledBack++
				if !seen.IsZero() && seen.After(last) {
					pr.AckedAfterRolledBack++
				}
				continue
			}
			if i < len(restores) {
				b, err := backupRows(i)
				if err != nil {
					return pr, err
				}
				if b.rows[k] == 0 && (seen.IsZero() || !seen.Before(restores[i].BackupAt)) {
					pr.Resurrected++
				}
			}
		}
	}
	pr.Leftovers = leftovers(p.dir)
	return pr, nil
}

// leftovers lists capture staging and main snapshots the agent should
// have cleaned up.
func leftovers(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".partial") || strings.Contains(n, ".snapshot-") {
			out = append(out, n)
		}
	}
	return out
}

// copyFile copies src to a new file dst (0600, O_EXCL|O_NOFOLLOW), synced.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
