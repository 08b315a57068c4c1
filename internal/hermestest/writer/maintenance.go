package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// maintain runs one of Hermes' maintenance operations that want the store
// to themselves, from a process of its own, the way Hermes' code does it:
//
//   - "vacuum": VACUUM on an ordinary connection;
//   - "journal-delete", "journal-wal": PRAGMA journal_mode=DELETE / WAL
//     (the database.journal_mode setting, applied at open);
//   - "restore:<backup>": _safe_restore_db's primary path: check the
//     backup's integrity, then copy its pages into the live store with
//     SQLite's online backup API (the inode stays, so open connections
//     see the restored rows), and close;
//   - "restore-fallback:<backup>": its fallback for a destination that
//     fails its structural check: refused while any other process holds
//     a file of the store, else the backup is copied beside it, the
//     sidecars removed and the copy renamed over the store.
//
// A refusal is returned with SQLite's own text, which is what Hermes'
// operator sees.
func maintain(db, op string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(1000)")
	if err != nil {
		return fmt.Errorf("open %s: %w", db, err)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	switch {
	case op == "vacuum":
		return retryBusy(ctx, func() error { _, err := c.Exec("VACUUM"); return wrap(db, "VACUUM", err) })
	case op == "journal-delete", op == "journal-wal":
		want := strings.TrimPrefix(op, "journal-")
		var got string
		if err := c.QueryRow("PRAGMA journal_mode=" + want).Scan(&got); err != nil {
			return wrap(db, "PRAGMA journal_mode="+want, err)
		}
		if !strings.EqualFold(got, want) {
			return fmt.Errorf("PRAGMA journal_mode=%s on %s: the store stays in %s mode", want, db, got)
		}
		return nil
	case strings.HasPrefix(op, "restore-fallback:"):
		return restoreFallback(db, strings.TrimPrefix(op, "restore-fallback:"))
	case strings.HasPrefix(op, "restore:"):
		return restoreOnline(ctx, c, db, strings.TrimPrefix(op, "restore:"))
	}
	return fmt.Errorf("unknown maintenance %q (vacuum, journal-delete, journal-wal, restore:<backup>, restore-fallback:<backup>)", op)
}

func restoreOnline(ctx context.Context, c *sql.DB, db, backup string) error {
	src, err := sql.Open("sqlite", "file:"+backup+"?mode=ro")
	if err != nil {
		return fmt.Errorf("open backup %s: %w", backup, err)
	}
	var ic string
	err = src.QueryRow("PRAGMA integrity_check").Scan(&ic)
	src.Close()
	if err != nil || ic != "ok" {
		return fmt.Errorf("backup %s failed its integrity check (%q, %v): not restored", backup, ic, err)
	}
	conn, err := c.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return retryBusy(ctx, func() error {
		return wrap(db, "restore from "+backup, conn.Raw(func(dc any) error {
			r, ok := dc.(interface {
				NewRestore(string) (*sqlite.Backup, error)
			})
			if !ok {
				return errors.New("the SQLite driver has no backup API")
			}
			b, err := r.NewRestore("file:" + backup + "?mode=ro")
			if err != nil {
				return err
			}
			for {
				more, err := b.Step(-1)
				if err != nil {
					b.Finish()
					return err
				}
				if !more {
					return b.Finish()
				}
			}
		}))
	})
}

func wrap(db, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s on %s: %w", what, db, err)
}
