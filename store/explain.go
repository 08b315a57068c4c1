package store

import (
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ExplainedError is a SQLite error about one file, with that file's path
// and what the operator can do about it: SQLite's own messages ("file is
// not a database (26)", "unable to open database file (14)", "no such
// table") name neither.
type ExplainedError struct {
	Path string
	Err  error
	Hint string
}

func (e *ExplainedError) Error() string {
	msg := e.Err.Error()
	if !strings.Contains(msg, e.Path) {
		msg = e.Path + ": " + msg
	}
	return fmt.Sprintf("%s (hint: %s)", msg, e.Hint)
}

func (e *ExplainedError) Unwrap() error { return e.Err }

// Explain returns err with path and a hint when it is one of the SQLite
// errors an operator meets on a bad store file; any other error, and one
// already explained, is returned as it is.
func Explain(path string, err error) error {
	if err == nil {
		return nil
	}
	var done *ExplainedError
	if errors.As(err, &done) {
		return err
	}
	hint := hintFor(err)
	if hint == "" {
		return err
	}
	return &ExplainedError{Path: path, Err: err, Hint: hint}
}

func hintFor(err error) string {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB:
			return "the file is not a SQLite database (or is damaged beyond its header): check the path; a Hermes store is restored from a backup with `agentctl restore`"
		case sqlite3.SQLITE_CANTOPEN:
			return "SQLite cannot open it: check that the file and its directory exist and that this user may read them (and write them, for a write: the -wal and -shm next to it too); run as the store's owner or root"
		case sqlite3.SQLITE_CORRUPT:
			return "the database is damaged: `agentctl doctor` says more; restore it from a backup with `agentctl restore`"
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
			return "this user may not write it: run as the store's owner or root"
		case sqlite3.SQLITE_FULL:
			return "the disk is full: free space and run it again"
		}
	}
	if strings.Contains(err.Error(), "no such table") {
		return "the database has no Hermes schema: check that the path names a Hermes state.db (a profile's state.db, not a capture directory or another program's database)"
	}
	return ""
}
