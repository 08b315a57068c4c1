package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/store"
)

// InspectReport is what --inspect-only prints.
type InspectReport struct {
	Path      string // resolved JSONL path
	SessionID string
	Lines     int
	Records   int
	Issues    []LineIssue
	Repaired  []int

	Store string // the store consulted, "" when none was
	// WouldAppend is how many records a replay would append now, or -1
	// when the store was not consulted or could not be read (StoreNote
	// says why).
	WouldAppend    int
	AlreadyPresent int
	SessionExists  bool
	StoreNote      string
}

// Inspect parses a diverted JSONL and reports what a replay would do,
// writing nothing. With dbPath "" it opens no database at all. With a
// store it reads it strictly read-only and creates no file: a store with
// -wal and -shm is opened mode=ro (a read-only connection never
// checkpoints or removes them); a cleanly closed store (neither file) is
// read as immutable, because a mode=ro open would create both; any other
// state is reported and not opened.
func Inspect(ctx context.Context, jsonlPath, dbPath string, opts ReplayOptions) (InspectReport, error) {
	resolved, sid, d, err := loadDiverted(jsonlPath, opts)
	if err != nil {
		return InspectReport{}, err
	}
	rep := InspectReport{Path: resolved, SessionID: sid, Lines: d.Lines, Records: len(d.Records),
		Issues: d.Issues, Repaired: d.Repaired, WouldAppend: -1}
	if dbPath == "" {
		rep.StoreNote = "no store given"
		return rep, nil
	}
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return rep, fmt.Errorf("inspect %s: %w", dbPath, err)
	}
	rep.Store = abs
	dsn, note := inspectDSN(abs)
	if dsn == "" {
		rep.StoreNote = note
		return rep, nil
	}
	if err := inspectStore(ctx, dsn, sid, d.Records, &rep); err != nil {
		rep.StoreNote = fmt.Sprintf("could not read the store: %v", store.Explain(abs, err))
		return rep, nil
	}
	rep.StoreNote = note
	return rep, nil
}

// inspectDSN picks a read-only way to open abs that creates nothing, or
// says why there is none.
func inspectDSN(abs string) (dsn, note string) {
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", "the store does not exist: a replay would fail"
	case err != nil:
		return "", fmt.Sprintf("cannot stat the store: %v", err)
	case !fi.Mode().IsRegular():
		return "", "the store is not a regular file (a symlink is never followed)"
	}
	if err := store.SidecarsRegular(abs); err != nil {
		return "", err.Error()
	}
	_, werr := os.Lstat(abs + "-wal")
	_, serr := os.Lstat(abs + "-shm")
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
	switch {
	case werr == nil && serr == nil:
		return "file:" + esc + "?mode=ro&_pragma=busy_timeout(5000)&_query_only=1", ""
	case errors.Is(werr, fs.ErrNotExist) && errors.Is(serr, fs.ErrNotExist):
		return "file:" + esc + "?mode=ro&immutable=1&_query_only=1",
			"the store has no -wal/-shm (closed); read without locks"
	}
	return "", "the store has only one of -wal/-shm (an incident in progress?): not opened"
}

func inspectStore(ctx context.Context, dsn, sid string, recs []Record, rep *InspectReport) error {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ok, err := store.SessionExists(ctx, conn, sid)
	if err != nil {
		return err
	}
	rep.SessionExists = ok
	var dest []store.Message
	if ok {
		if dest, err = store.ReadMessages(ctx, conn, sid); err != nil {
			return err
		}
	}
	rep.AlreadyPresent = alreadyPersisted(dest, recs)
	rep.WouldAppend = len(recs) - rep.AlreadyPresent
	return nil
}
