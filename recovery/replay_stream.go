//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/store"
)

// maxStreamLine bounds one line of a file the daemon replays on a
// profile's behalf. A line is one message; Hermes cannot have produced a
// message larger than a model's context window (the largest are about 2M
// tokens, some 8 MB of text), and its ASCII-only JSON at most sextuples
// that (\uXXXX escapes): 64 MiB is above anything real, and with the
// few copies one line is held in while it is parsed and inserted, keeps
// a hostile file's cost to some hundreds of MB. A longer line fails the
// job with the line number; an operator can still replay the file with
// agentctl replay (bounded at maxLine).
const maxStreamLine = 64 << 20

// replayFileStreaming is ReplayFile for a checked input (the daemon's
// replays): the file is read line by line inside the transaction, each
// record matched against the session's rows and appended as it comes, so
// the agent's memory does not grow with the file. What it holds is one
// line (at most maxStreamLine), the
// session's existing rows (they are the store's, not the file's), the ids
// of the appended rows (8 bytes each) and the list of bad lines.
//
// The write lock is held while the file is read: a long file keeps
// Hermes' writers waiting as long as its appends do, no longer.
func replayFileStreaming(ctx context.Context, dbPath, jsonlPath string, opts ReplayOptions) (rep ReplayReport, err error) {
	sid := SessionIDFor(jsonlPath, opts.SessionID)
	if sid == "" {
		return ReplayReport{}, fmt.Errorf("replay %s: no session id: give one, or name the file <session_id>.jsonl", jsonlPath)
	}
	f, err := openReplayInput(jsonlPath, opts.Input)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	resolved := filepath.Clean(jsonlPath)
	w, err := openWritableChecked(ctx, dbPath, opts.Input)
	if err != nil {
		return ReplayReport{Path: resolved, SessionID: sid}, fmt.Errorf("replay %s: %w", jsonlPath, err)
	}
	w.SetCheckpointGate(opts.CheckpointGate)
	defer closeWritable(w, "the replay of "+resolved, &err)
	return replayStream(ctx, w, f, resolved, sid, opts, maxStreamLine)
}

// replayOperatorFile is ReplayFile for the operator's own file (agentctl
// replay, a job queued over the socket): named by the operator, so a
// symlink to it is fine, but resolved once and read only through the fd
// opened then; streamed like the daemon's replays, with one line bounded
// at maxLine.
func replayOperatorFile(ctx context.Context, dbPath, jsonlPath string, opts ReplayOptions) (rep ReplayReport, err error) {
	sid := SessionIDFor(jsonlPath, opts.SessionID)
	if sid == "" {
		return ReplayReport{}, fmt.Errorf("replay %s: no session id: give one, or name the file <session_id>.jsonl", jsonlPath)
	}
	f, resolved, err := openOperatorInput(jsonlPath)
	if err != nil {
		return ReplayReport{}, err
	}
	defer f.Close()
	w, err := store.Store{Path: dbPath, DirID: opts.StoreDir}.OpenWritable(ctx)
	if err != nil {
		return ReplayReport{Path: resolved, SessionID: sid}, fmt.Errorf("replay %s: %w", jsonlPath, err)
	}
	w.SetCheckpointGate(opts.CheckpointGate)
	defer closeWritable(w, "the replay of "+resolved, &err)
	rep, err = replayStream(ctx, w, f, resolved, sid, opts, maxLine)
	return rep, store.Explain(w.Path(), err)
}

// openOperatorInput resolves the operator's JSONL path once, as Hermes
// does (the resolved path seeds the recovery ids), and opens that path
// without following a link again and without blocking; the file must be
// regular. Everything after reads the fd.
func openOperatorInput(path string) (*os.File, string, error) {
	resolved, err := ResolveJSONLPath(path)
	if err != nil {
		return nil, "", fmt.Errorf("replay: diverted transcript: %w (hint: check the path)", err)
	}
	f, err := openNoFollow(resolved)
	if errors.Is(err, store.ErrNotRegular) {
		return nil, "", fmt.Errorf("replay: diverted transcript %s is not a regular file: %w", path, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("replay: diverted transcript: %w (hint: check that this user may read it)", err)
	}
	return f, resolved, nil
}

func replayStream(ctx context.Context, w *store.Writable, f *os.File, resolved, sid string, opts ReplayOptions, lineMax int) (ReplayReport, error) {
	now := float64(time.Now().UnixNano()) / 1e9
	var rep ReplayReport
	job := func(tx *store.Tx) error {
		// A busy retry runs the job again: from the file's start.
		rep = ReplayReport{Path: resolved, SessionID: sid}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read %s: %w", resolved, err)
		}
		created, closed, err := ensureSession(tx, sid, opts.Session)
		if err != nil {
			return err
		}
		rep.SessionCreated = created
		dest, err := store.ReadMessages(tx.Context(), tx, sid)
		if err != nil {
			return err
		}
		chain := NewChain(resolved)
		next, matching := 0, true
		d, err := scanDiverted(f, lineMax, func(r Record) error {
			// The chain runs over every record, FromLine or not, so the
			// ids are the ones Hermes computes for the whole file.
			r.RecoveryID = chain.Next(r.identity)
			r.Fields.Set("display_metadata", mergeRecoveryID(r.Fields, r.RecoveryID))
			if r.Line < opts.FromLine {
				return nil
			}
			rep.Records++
			if matching {
				// alreadyPersisted, one record at a time.
				for next < len(dest) {
					row := &dest[next]
					next++
					if sameRow(row, r) {
						rep.AlreadyPresent++
						return nil
					}
				}
				matching = false
			}
			if closed {
				return fmt.Errorf("session %s: %w; replay into the session that continues it (--session-id)", sid, ErrCompressedSession)
			}
			id, err := tx.AppendMessage(recordMessage(sid, r, now+float64(rep.Appended)*1e-6))
			if err != nil {
				return fmt.Errorf("line %d: %w", r.Line, err)
			}
			rep.AppendedIDs = append(rep.AppendedIDs, id)
			rep.Appended++
			return nil
		})
		rep.Lines, rep.Issues, rep.Repaired = d.Lines, d.Issues, d.Repaired
		if err != nil {
			return fmt.Errorf("read diverted transcript %s: %w", resolved, err)
		}
		return nil
	}
	if err := w.InTx(ctx, job); err != nil {
		return rep, fmt.Errorf("replay %s into session %s of %s: %w (nothing was written; the file is unchanged, retry is safe)",
			resolved, sid, w.Path(), err)
	}
	return rep, nil
}

// ResolveOperatorInput is what a JSONL an operator names resolves to, once
// (the path the replay reads and that seeds its recovery ids), checked to
// be a regular file this process may open; the daemon queues that path, so
// a link re-pointed later changes nothing.
func ResolveOperatorInput(path string) (string, error) {
	f, resolved, err := openOperatorInput(path)
	if err != nil {
		return "", err
	}
	f.Close()
	return resolved, nil
}
