//go:build linux

package supervisor

import (
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A replaced store's writer (policy terminate) goes on committing into
// the orphan until its SIGTERM and checkpoints it at close: the orphan
// changed after the capture taken before release, so the final capture
// replaces it, and the first one is removed: one capture per orphan.
func TestSupersededCaptureRemoved(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 20)
	hermestest.RestoreOver(t, db)
	inc := resolved(t, a, db, journal.KindReplaced)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
}
