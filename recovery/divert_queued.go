//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/stateguard/stateguard/store"
)

// queuedRows reads the rows the store's other incidents have diverted and
// may not have replayed yet (req.Queued), per session, as the rows their
// replay writes. Two incidents can hold the same orphan's rows: a
// mispaired WAL that a restore then renamed a main over is captured by
// both, and when both diverts read the live store before either replays,
// each finds the rows missing; their replays are told apart by the
// recovery ids, which are seeded by the file's path, so both copies were
// appended (issue 18, seed 3). A divert counts these rows as present, as
// the replay of the earlier divert is about to make them.
//
// An incident with no divert directory (not diverted yet) is skipped; one
// whose directory is damaged is skipped with a warning: its replay fails
// on its own checks, and it must not hold this divert back. Files are
// read through recovered's handle, never by name.
func queuedRows(ctx context.Context, req *DivertRequest, recovered capDir) (map[string][]store.Message, error) {
	if len(req.Queued) == 0 {
		return nil, nil
	}
	out := map[string][]store.Message{}
	for _, id := range req.Queued {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if id == req.IncidentID || !incidentIDPattern.MatchString(id) || !recovered.exists(id) {
			continue
		}
		d, err := recovered.openChildDir(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the divert of incident %s: %w", id, err)
		}
		err = readQueued(d, out)
		d.close()
		if errors.Is(err, ErrDivertDamaged) {
			req.logger().Warn("a queued divert is damaged; its rows are not counted", "incident", id, "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the divert of incident %s: %w", id, err)
		}
	}
	return out, nil
}

// readQueued adds the replay rows of the divert in d to out. Rows under
// pre-replacement/ are replayed only when an operator asks, so they are
// not counted.
func readQueued(d capDir, out map[string][]store.Message) error {
	rep, err := readDivertIn(d)
	if err != nil {
		return err
	}
	for _, f := range rep.ReplayFiles(false) {
		fh, err := openInDivert(d, f.Path)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrDivertDamaged, f.Path, err)
		}
		dv, err := ParseDiverted(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Path, err)
		}
		for _, r := range dv.Records {
			out[f.SessionID] = append(out[f.SessionID], recordMessage(f.SessionID, r, 0))
		}
	}
	return nil
}
