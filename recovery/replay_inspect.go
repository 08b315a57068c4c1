package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/fileid"
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
	// The operator's path is resolved once (ResolveStore); every later
	// look at the store goes through a handle on that directory.
	st, err := store.ResolveStore(dbPath)
	if err != nil {
		rep.Store, _ = filepath.Abs(dbPath)
		rep.StoreNote = fmt.Sprintf("could not reach the store: %v", err)
		return rep, nil
	}
	rep.Store = st.Path
	inspectResolved(st)
	h, err := st.OpenDir()
	if err != nil {
		rep.StoreNote = fmt.Sprintf("could not reach the store: %v", err)
		return rep, nil
	}
	dsn, note := inspectDSN(h, filepath.Base(st.Path))
	h.Close()
	if dsn == nil {
		rep.StoreNote = note
		return rep, nil
	}
	db, err := store.OpenSQLiteIn(st.Dir(), st.DirID, filepath.Base(st.Path), func(p string) (*sql.DB, error) {
		db, err := store.OpenLive(p, dsn(p))
		if err == nil {
			if err = db.PingContext(ctx); err != nil { // SQLite opens the file here
				db.Close()
			}
		}
		return db, err
	})
	if err == nil {
		err = inspectStore(ctx, db, sid, d.Records, &rep)
		db.Close()
	}
	if err != nil {
		rep.StoreNote = fmt.Sprintf("could not read the store: %v", store.Explain(st.Path, err))
		return rep, nil
	}
	rep.StoreNote = note
	return rep, nil
}

// inspectResolved is called once the store is resolved: a test swaps the
// directory there, as an owner racing the operator would.
var inspectResolved = func(store.Store) {}

// inspectDSN picks a read-only way to open the store file name in the
// directory that creates nothing, or says why there is none. Every look
// is through the directory's handle.
func inspectDSN(h *store.DirHandle, name string) (dsn func(path string) string, note string) {
	st, err := h.Lstat(name)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("cannot stat the store: %v", err)
	case !st.Exists:
		return nil, "the store does not exist: a replay would fail"
	case !st.Regular():
		return nil, "the store is not a regular file (a symlink is never followed)"
	}
	wal, werr := h.Lstat(name + "-wal")
	shm, serr := h.Lstat(name + "-shm")
	if werr != nil || serr != nil {
		return nil, fmt.Sprintf("cannot stat the store's sidecars: %v", errors.Join(werr, serr))
	}
	for _, f := range []struct {
		sfx string
		st  fileid.State
	}{{"-wal", wal}, {"-shm", shm}} {
		if f.st.Exists && !f.st.Regular() {
			return nil, fmt.Sprintf("%s is a %v, not a regular file: SQLite would block on it (hint: remove it; it is no SQLite sidecar)",
				h.Join(name+f.sfx), f.st.Mode.Type())
		}
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	switch {
	case wal.Exists && shm.Exists:
		return func(p string) string {
			return "file:" + esc.Replace(p) + "?mode=ro&_pragma=busy_timeout(5000)&_query_only=1"
		}, ""
	case !wal.Exists && !shm.Exists:
		return func(p string) string { return "file:" + esc.Replace(p) + "?mode=ro&immutable=1&_query_only=1" },
			"the store has no -wal/-shm (closed); read without locks"
	}
	return nil, "the store has only one of -wal/-shm (an incident in progress?): not opened"
}

func inspectStore(ctx context.Context, db *sql.DB, sid string, recs []Record, rep *InspectReport) error {
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
