package incident

import "path/filepath"

// dropSuperseded removes the capture taken before release once the final
// one, which replaced it, is journaled as the incident's: both are of the
// same orphan, the final one as it was when its writers were gone, and
// only that one is read (docs/design.md §7 step 5, one capture per
// orphaned generation). It was left beside the final one, so an orphan
// that changed after its first capture kept two. A failure leaves it,
// warned: it is a copy, never the only one.
func (e *Engine) dropSuperseded(li *live, old, final string) {
	if old == "" || old == final {
		return
	}
	// Only once the journal names the final one: a resume reads the
	// capture the journal names.
	ctx, cancel := e.journalCtx()
	inc, err := e.d.Journal.GetIncident(ctx, li.id)
	cancel()
	if err != nil || filepath.Clean(inc.Detail.CapturePath) != filepath.Clean(final) {
		e.log.Warn("capture taken before release superseded, kept: the journal does not name the final one", "incident", li.id,
			"old", old, "new", final, "err", err)
		return
	}
	freed, err := e.d.Salvage.RemoveCapture(e.st, old)
	if err != nil {
		e.log.Warn("capture taken before release superseded, but not removed", "incident", li.id, "old", old, "new", final, "err", err)
		return
	}
	e.log.Info("capture taken before release superseded and removed", "incident", li.id, "old", old, "new", final, "freed_bytes", freed)
}
