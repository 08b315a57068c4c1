package incident

import (
	"errors"
	"io/fs"
	"log/slog"
	"slices"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
)

// Captures of resolved incidents stay in the profile directory
// (`agentctl export --capture` reads them), and on a store that sees
// many incidents they add up: in a 1000-cycle chaos run they filled the
// full-disk profile's 192 MB filesystem, and every later capture there
// was refused for space, its writers kept frozen for good. A resolved
// incident's rows are in the store and in its diverted JSONL, so its
// capture is the space that can be given back: when a capture does not
// fit, the store's oldest resolved captures are removed, one at a time,
// until it does or none is left. Captures of incidents that are not
// resolved (open, unrecoverable, failed) hold the only copy of their
// rows and are never touched.

// spaceShort reports whether a capture failed for space that pruning can
// give: the free space, not a configured capture.max_bytes.
func spaceShort(err error) bool {
	var over *recovery.BudgetError
	if errors.As(err, &over) {
		return !over.Configured
	}
	return errors.Is(err, recovery.ErrNoSpace)
}

// pruneOneCapture removes the oldest capture of one of the store's
// resolved incidents other than li, and reports whether it removed one.
func (e *Engine) pruneOneCapture(li *live) bool {
	if e.d.Journal == nil {
		return false
	}
	incs, err := e.d.Journal.ListIncidents(e.ctx, journal.ListOptions{Store: e.st.Path, State: journal.StateResolved})
	if err != nil {
		e.log.Warn("cannot list resolved incidents to free space for a capture", "incident", li.id, "err", err)
		return false
	}
	slices.SortFunc(incs, func(a, b journal.Incident) int { return a.OpenedAt.Compare(b.OpenedAt) })
	for _, inc := range incs {
		path := inc.Detail.CapturePath
		if inc.ID == li.id || path == "" {
			continue
		}
		freed, err := e.d.Salvage.RemoveCapture(e.st, path)
		gone := errors.Is(err, fs.ErrNotExist)
		if err != nil && !gone {
			e.emit(slog.LevelWarn, "capture of a resolved incident not removed", EventCapturePruned, li,
				"resolved", inc.ID, "path", path, "err", err)
			continue
		}
		if _, err := e.d.Journal.UpdateIncident(e.ctx, inc.ID, journal.Step{Name: journal.StepCapturePruned,
			Detail: map[string]any{"path": path, "bytes": freed, "for": li.id, "gone": gone}},
			func(r *journal.Incident) error { r.Detail.CapturePath = ""; return nil }); err != nil {
			e.log.Error("journal capture pruned", "incident", inc.ID, "err", err)
			return false // not recorded: do not go on removing
		}
		if gone {
			// Removed by the operator already: it frees nothing now, and
			// the journal no longer names it.
			continue
		}
		e.emit(slog.LevelWarn, "capture of a resolved incident removed to make room", EventCapturePruned, li,
			"resolved", inc.ID, "path", path, "bytes", freed)
		return true
	}
	return false
}
