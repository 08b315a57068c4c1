package supervisor

import "github.com/stateguard/stateguard/recovery"

// cleanPrivateCopies removes the private copies a killed divert left in
// the temp dir (they take disk forever otherwise; only those whose process
// is gone, or whose owner file no stateguard process wrote). It runs
// after start-up, never before it: the temp dir is shared, and nothing in
// it may delay the agent watching its stores.
func (a *Agent) cleanPrivateCopies() {
	defer a.wg.Done()
	removed, err := recovery.CleanPrivateCopies("")
	if len(removed) > 0 || err != nil {
		a.log.Info("stale private capture copies and copies at a cut removed", "removed", removed, "err", err)
	}
}
