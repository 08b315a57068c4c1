package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	_ "modernc.org/sqlite" // the only SQLite allowed
)

// rowKey identifies a message row: the writer never writes two rows with
// the same session, content and timestamp, so two such rows are a
// duplicate. Assistant tool-call rows have no content; their tool_calls
// (unique per seq) stand in.
type rowKey struct {
	session, content string
	ts               float64
}

type storeRows struct {
	rows map[rowKey]int
	// replayed counts the copies a replay appended: rows whose
	// display_metadata carries a diverted_recovery_id (Hermes' recovery
	// id, which stateguard's replay and Hermes' import both stamp).
	replayed map[rowKey]int
	sessions map[string][2]int // message_count, rows
}

// messageCols are the columns readRows reads of messages.
const messageCols = `session_id, content, tool_calls, timestamp,
	CASE WHEN json_valid(display_metadata) THEN json_extract(display_metadata, '$.diverted_recovery_id') IS NOT NULL ELSE 0 END`

// readRows reads every message of the store at path (a private copy).
func readRows(path string) (*storeRows, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := newStoreRows()
	// A store whose schema never reached its main file (the writers'
	// first commits were all in a -wal that was then unlinked, and a
	// backup was taken before they made it again) has no tables at all:
	// it holds no rows, and that is not corruption.
	var objects int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&objects); err != nil {
		return nil, fmt.Errorf("read schema of %s: %w", path, err)
	}
	if objects == 0 {
		return out, nil
	}
	if err := out.scan(db, `SELECT `+messageCols+` FROM messages`); err != nil {
		return nil, fmt.Errorf("read messages of %s: %w", path, err)
	}
	return out, out.readSessions(db)
}

func newStoreRows() *storeRows {
	return &storeRows{rows: map[rowKey]int{}, replayed: map[rowKey]int{}, sessions: map[string][2]int{}}
}

// scan adds the rows query returns.
func (out *storeRows) scan(db *sql.DB, query string, args ...any) error {
	rs, err := db.Query(query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var s string
		var content, calls sql.NullString
		var ts float64
		var replayed bool
		if err := rs.Scan(&s, &content, &calls, &ts, &replayed); err != nil {
			return err
		}
		k := rowKey{session: s, content: content.String, ts: ts}
		if !content.Valid {
			k.content = "\x00calls:" + calls.String
		}
		out.rows[k]++
		if replayed {
			out.replayed[k]++
		}
		c := out.sessions[s]
		c[1]++
		out.sessions[s] = c
	}
	return rs.Err()
}

func (out *storeRows) readSessions(db *sql.DB) error {
	ss, err := db.Query(`SELECT id, message_count FROM sessions`)
	if err != nil {
		return err
	}
	defer ss.Close()
	for ss.Next() {
		var id string
		var n int
		if err := ss.Scan(&id, &n); err != nil {
			return err
		}
		c := out.sessions[id]
		c[0] = n
		out.sessions[id] = c
	}
	return ss.Err()
}

// damagedChunk is how many message ids readRowsDamaged reads at once.
const damagedChunk = 256

// readRowsDamaged reads what it can of a store that readRows could not
// read (malformed): messages by id range, skipping the ranges SQLite
// cannot read, so a corrupt store's rows are still counted. It says how
// many id ranges were unreadable; sessions are not read.
func readRowsDamaged(path string) (*storeRows, int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, 0, err
	}
	defer db.Close()
	var maxID int64
	if err := db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'messages'`).Scan(&maxID); err != nil {
		if err := db.QueryRow(`SELECT max(id) FROM messages`).Scan(&maxID); err != nil {
			return nil, 0, fmt.Errorf("read the highest message id of %s: %w", path, err)
		}
	}
	out, bad := newStoreRows(), 0
	for lo := int64(0); lo <= maxID; lo += damagedChunk {
		part := newStoreRows()
		if err := part.scan(db, `SELECT `+messageCols+` FROM messages WHERE id >= ? AND id < ?`, lo, lo+damagedChunk); err != nil {
			bad++
			continue
		}
		for k, n := range part.rows {
			out.rows[k] += n
		}
		for k, n := range part.replayed {
			out.replayed[k] += n
		}
	}
	out.sessions = map[string][2]int{}
	return out, bad, nil
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
