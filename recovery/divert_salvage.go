//go:build unix

package recovery

import (
	"cmp"
	"context"
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
	healthy, err := store.OpenReadOnly(req.Store)
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
		d.missing(capRows[sid], have, req.ReplacedAt)
		out = append(out, d)
	}
	return out, nil
}
