package recovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/store"
)

// Replay is ReplayFile into a store the test already has open: the same
// engine (replayStream), the same input checks.
func Replay(ctx context.Context, w *store.Writable, jsonlPath string, opts ReplayOptions) (ReplayReport, error) {
	sid := SessionIDFor(jsonlPath, opts.SessionID)
	if sid == "" {
		return ReplayReport{}, fmt.Errorf("replay %s: no session id: give one, or name the file <session_id>.jsonl", jsonlPath)
	}
	var f *os.File
	var resolved string
	var err error
	if opts.Input.set() {
		f, err = openReplayInput(jsonlPath, opts.Input)
		resolved = filepath.Clean(jsonlPath)
	} else {
		f, resolved, err = openOperatorInput(jsonlPath)
	}
	if err != nil {
		return ReplayReport{}, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	return replayStream(ctx, w, f, resolved, sid, opts, lineBound(opts))
}

// lineBound is the longest line a replay reads: the daemon's bound for a
// checked input, else the operator's.
func lineBound(opts ReplayOptions) int {
	if opts.Input.set() {
		return maxStreamLine
	}
	return maxLine
}

// ParseDivertedFile reads a diverted JSONL read-only, through one fd
// opened without blocking and kept only for a regular file (a FIFO at the
// name would block a plain open forever). It never modifies the file.
func ParseDivertedFile(path string) (Diverted, error) {
	f, _, err := openOperatorInput(path)
	if err != nil {
		return Diverted{}, fmt.Errorf("read diverted transcript: %w", err)
	}
	defer f.Close()
	d, err := ParseDiverted(f)
	if err != nil {
		return d, fmt.Errorf("read diverted transcript %s: %w", path, err)
	}
	return d, nil
}
