//go:build unix

package recovery

import (
	"context"
	"fmt"

	"github.com/stateguard/stateguard/walsalvage"
)

// checkPreviousGeneration refuses to pair a rewritten store's capture
// whose WAL holds committed frames of its previous generation (the
// frames left beyond a restarted header, walsalvage.Previous). Their
// rows were checkpointed into the main the tool then overwrote, so the
// captured main no longer has them, and SQLite, reading the WAL from its
// new header, never sees them: a paired divert would find nothing
// missing. The page-image divert reads both generations instead
// (ErrCaptureUnpaired). Other kinds keep the main the checkpoint wrote,
// whole, so their pairing stands.
func checkPreviousGeneration(ctx context.Context, req *DivertRequest) error {
	if req.Kind != KindRewritten {
		return nil
	}
	info, err := openCapture(ctx, req.Capture, false)
	if err != nil || info.WAL == "" {
		return nil // the paired divert reports what is wrong with the capture
	}
	f, err := info.open(info.WAL)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	w, err := walsalvage.ReadWAL(ctx, f, fi.Size())
	if err == nil {
		err = w.ReadPrevious(ctx, f, fi.Size())
	}
	if err != nil || w.Previous == nil || w.Previous.Committed == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: its WAL was restarted after a checkpoint into the main that was then rewritten, and %d committed frames of the previous generation are left beyond the new header (salts %08x-%08x)",
		ErrCaptureUnpaired, req.Capture, w.Previous.Committed, w.Previous.Salts[0], w.Previous.Salts[1])
}
