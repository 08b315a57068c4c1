//go:build unix

package recovery

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// DivertSalvaged is Divert for a capture whose WAL has no main it fits:
// the capture's rows are the ones res salvaged from the WAL's own page
// images (walsalvage.Salvage), diffed against the healthy store exactly
// as Divert diffs a capture's, and written as the same diverted JSONL,
// one file per session, under the same incident directory, with the same
// divert.json; the replay takes them like any other divert. req.Capture
// names the capture directory that keeps the raw files; it is recorded,
// not opened. A salvaged session row, when there is one, is the template
// for a session the healthy store lacks.
//
// What the salvage could not recover is in res.Report, not here: the
// caller records it in the incident.
func DivertSalvaged(ctx context.Context, req DivertRequest, res *walsalvage.Result) (DivertReport, error) {
	if res == nil {
		return DivertReport{}, errors.New("divert salvaged rows: no salvage result given")
	}
	return divertWith(ctx, req, func(ctx context.Context, req *DivertRequest) ([]sessionDiff, error) {
		return diffSalvaged(ctx, req, res)
	})
}

// salvagedSessions groups the salvaged messages by session, sessions in
// the order of their first message, rows in rowid order, as Divert lists
// a capture's.
func salvagedSessions(res *walsalvage.Result) (order []string, rows map[string][]store.Message, err error) {
	rows = map[string][]store.Message{}
	for _, r := range res.Messages {
		m, err := store.MessageFromColumns(rowValues(r))
		if err != nil {
			return nil, nil, fmt.Errorf("salvaged message %d: %w", r.RowID, err)
		}
		if m.SessionID == "" {
			continue
		}
		if _, ok := rows[m.SessionID]; !ok {
			order = append(order, m.SessionID)
		}
		rows[m.SessionID] = append(rows[m.SessionID], m)
	}
	for _, ms := range rows {
		slices.SortFunc(ms, func(a, b store.Message) int { return cmp.Compare(a.ID, b.ID) })
	}
	return order, rows, nil
}

func rowValues(r walsalvage.Row) map[string]any {
	out := make(map[string]any, len(r.Values))
	for c, v := range r.Values {
		out[c] = v.Any()
	}
	return out
}

func diffSalvaged(ctx context.Context, req *DivertRequest, res *walsalvage.Result) ([]sessionDiff, error) {
	return diffSalvagedCut(ctx, req, res, replayCut{at: req.ReplacedAt})
}

// diffSalvagedCut is diffSalvaged with the rule that splits the missing
// rows given.
func diffSalvagedCut(ctx context.Context, req *DivertRequest, res *walsalvage.Result, cut replayCut) ([]sessionDiff, error) {
	order, capRows, err := salvagedSessions(res)
	if err != nil {
		return nil, err
	}
	templates := map[string]store.Session{}
	for _, r := range res.Sessions {
		if s, err := store.SessionFromColumns(rowValues(r)); err == nil && s.ID != "" {
			templates[s.ID] = s
		}
	}
	healthy, err := healthyStore(req).OpenReadOnly()
	if err != nil {
		return nil, err
	}
	defer healthy.Close()
	// One read transaction: every session against the same snapshot.
	hTx, err := healthy.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", req.Store, err)
	}
	defer hTx.Rollback()
	sessCols, err := tableColumns(ctx, hTx, "sessions")
	if err != nil {
		return nil, fmt.Errorf("healthy store: %w", err)
	}
	var out []sessionDiff
	for _, sid := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d := sessionDiff{sid: sid}
		exists, err := store.SessionExists(ctx, hTx, sid)
		if err != nil {
			return nil, fmt.Errorf("healthy store: %w", err)
		}
		var have []store.Message
		if exists {
			if have, err = store.ReadMessages(ctx, hTx, sid); err != nil {
				return nil, fmt.Errorf("healthy store: session %s: %w", sid, err)
			}
		} else {
			d.newSession = true
			if s, ok := templates[sid]; ok {
				pruneSession(&s, sessCols)
				d.session = &s
			}
		}
		d.missing(capRows[sid], have, req.queued[sid], cut)
		out = append(out, d)
	}
	return out, nil
}

// checkPaired runs SQLite's quick_check on the capture's private copy (WAL
// recovered into it): a WAL written on another main than the one captured
// makes a malformed database, and reading rows out of it would divert
// whatever the mix of pages happens to decode to.
func checkPaired(ctx context.Context, q *sql.Tx, capture string) error {
	var res string
	err := q.QueryRowContext(ctx, "PRAGMA quick_check(1)").Scan(&res)
	if err == nil && res == "ok" {
		return nil
	}
	if err == nil {
		err = errors.New(res)
	} else if ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: %s: %v (its rows are read from the WAL's page images instead)", ErrCaptureUnpaired, capture, err)
}

// DivertWALImages diverts what a capture's WAL holds when it fits no main
// (ErrCaptureUnpaired): walsalvage reads the rows out of its committed
// page images, the capture's main (if any) lending its schema only, and
// DivertSalvaged writes them as any divert. The report says what could
// not be recovered; it is the caller's to record. A capture without a WAL
// to salvage is an error naming the directory.
func DivertWALImages(ctx context.Context, req DivertRequest) (DivertReport, *walsalvage.Report, error) {
	info, err := openCapture(ctx, req.Capture, true)
	if err != nil {
		return DivertReport{}, nil, err
	}
	if info.WAL == "" {
		return DivertReport{}, nil, fmt.Errorf("salvage %s: the capture holds no WAL to read rows from", req.Capture)
	}
	wal, err := info.open(info.WAL)
	if err != nil {
		return DivertReport{}, nil, fmt.Errorf("salvage %s: %w", info.WAL, err)
	}
	defer wal.Close()
	fi, err := wal.Stat()
	if err != nil {
		return DivertReport{}, nil, fmt.Errorf("salvage %s: %w", info.WAL, err)
	}
	var opts walsalvage.Options
	if info.Main != "" {
		if main, err := info.open(info.Main); err == nil {
			defer main.Close()
			if mfi, err := main.Stat(); err == nil {
				opts = walsalvage.Options{Main: main, MainSize: mfi.Size()}
			}
		}
	}
	res, err := walsalvage.Salvage(ctx, wal, fi.Size(), opts)
	if errors.Is(err, store.ErrShortHeader) || errors.Is(err, walsalvage.ErrInvalidWAL) {
		// Emptied by a TRUNCATE checkpoint, or torn inside its header:
		// SQLite reads no frame from such a WAL, so it holds no row to
		// salvage. That is a divert of nothing, not a failure.
		res, err = &walsalvage.Result{Report: walsalvage.Report{Stop: "no committed frame: " + err.Error()}}, nil
	}
	if err != nil {
		return DivertReport{}, nil, fmt.Errorf("salvage %s: %w", info.WAL, err)
	}
	cut, err := salvageCut(ctx, &req, wal, fi.Size(), opts, res)
	if err != nil {
		return DivertReport{}, &res.Report, fmt.Errorf("salvage %s at %s: %w", info.WAL, req.Cut, err)
	}
	rep, err := divertWith(ctx, req, func(ctx context.Context, r *DivertRequest) ([]sessionDiff, error) {
		r.cutNote = req.cutNote
		return diffSalvagedCut(ctx, r, res, cut)
	})
	return rep, &res.Report, err
}
