package journal

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// WALPosition is where a store's live WAL stood when the agent last
// looked (each check that found it moved, and the shutdown): frames up
// to Frame of the WAL with these salts were committed by At. An incident
// found at the next start cuts its replay there: what the orphan had
// committed by then, before the agent stopped, was in the store a restore
// done afterwards rolled back on purpose.
type WALPosition struct {
	Store       string    `json:"store"`
	Main        fileid.ID `json:"main"`
	MainSize    int64     `json:"main_size"`
	MainCounter uint32    `json:"main_counter"` // the main header's change counter
	MainPage1   uint64    `json:"main_page1"`   // a hash of the main's page 1 (FNV-1a)
	MainBirth   int64     `json:"main_birth"`   // statx btime, ns; 0 when unknown
	WAL         fileid.ID `json:"wal"`
	Salt1       uint32    `json:"salt1"`
	Salt2       uint32    `json:"salt2"`
	Frame       uint32    `json:"frame"`      // the last committed frame
	Backfilled  uint32    `json:"backfilled"` // the wal-index's nBackfill
	At          time.Time `json:"at"`
}

// SameAs reports whether p records the same position as q, whenever
// each was read: the write is skipped when nothing moved.
func (p WALPosition) SameAs(q WALPosition) bool {
	p.At, q.At = time.Time{}, time.Time{}
	return p == q
}

// RecordWALPositions stores each p as its store's last position, in one
// transaction (the agent's stop journals every store's at once).
func (j *Journal) RecordWALPositions(ctx context.Context, ps ...WALPosition) error {
	err := j.write(ctx, func(tx *sql.Tx) error {
		for _, p := range ps {
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO wal_positions
				(store, main_dev, main_ino, main_size, main_counter, main_page1, main_birth, wal_dev, wal_ino, salt1, salt2, frame, backfilled, at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				p.Store, int64(p.Main.Dev), int64(p.Main.Ino), p.MainSize, p.MainCounter, int64(p.MainPage1), p.MainBirth, int64(p.WAL.Dev), int64(p.WAL.Ino),
				p.Salt1, p.Salt2, p.Frame, p.Backfilled, toNanos(p.At)); err != nil {
				return fmt.Errorf("%s: %w", p.Store, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("journal %s: record wal positions: %w", j.path, err)
	}
	return nil
}

// WALPositions returns every store's last recorded position, by store.
func (j *Journal) WALPositions(ctx context.Context) (map[string]WALPosition, error) {
	ps, err := queryAll(ctx, j, "wal positions", scanWALPosition, `SELECT store, main_dev, main_ino, main_size, main_counter, main_page1, main_birth,
		wal_dev, wal_ino, salt1, salt2, frame, backfilled, at FROM wal_positions`)
	if err != nil {
		return nil, err
	}
	out := make(map[string]WALPosition, len(ps))
	for _, p := range ps {
		out[p.Store] = p
	}
	return out, nil
}

func scanWALPosition(r rowScanner) (WALPosition, error) {
	var p WALPosition
	var mdev, mino, page1, wdev, wino, at int64
	if err := r.Scan(&p.Store, &mdev, &mino, &p.MainSize, &p.MainCounter, &page1, &p.MainBirth, &wdev, &wino,
		&p.Salt1, &p.Salt2, &p.Frame, &p.Backfilled, &at); err != nil {
		return WALPosition{}, err
	}
	p.Main = fileid.ID{Dev: uint64(mdev), Ino: uint64(mino)}
	p.WAL = fileid.ID{Dev: uint64(wdev), Ino: uint64(wino)}
	p.MainPage1 = uint64(page1)
	p.At = fromNanos(at)
	return p, nil
}
