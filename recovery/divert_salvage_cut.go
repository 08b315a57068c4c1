//go:build unix

package recovery

import (
	"context"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// salvageCut is the frame cut of a divert read from WAL page images (a
// rewritten main: the capture's WAL fits no main). The rows that were in
// the WAL at the cut are those its page images up to the cut's frame
// hold, salvaged again from that prefix of the WAL; a missing row is
// rolled back on purpose only if it was one of them (and stamped by
// Cut.At), so a row the orphan committed after the cut is replayed
// whatever its timestamp, and the rows of the last moment before the
// rewrite stay rolled back. Without a cut, or when the WAL no longer
// holds the frames at the cut (restarted: other salts; shorter), it is
// the timestamp rule, and req's cut note says why.
//
// full is the salvage of the whole WAL: the rows it read from the previous
// generation's frames (beyond a restarted header) are rows at the cut too
// when the cut is in the current generation, committed before its
// restart.
func salvageCut(ctx context.Context, req *DivertRequest, wal io.ReaderAt, size int64, opts walsalvage.Options, full *walsalvage.Result) (replayCut, error) {
	if req.Kind != KindReplaced && req.Kind != KindMispaired && req.Kind != KindRewritten {
		return replayCut{}, nil
	}
	if req.Cut == nil {
		req.cutNote = "timestamps: no wal position was recorded"
		return replayCut{at: req.ReplacedAt}, nil
	}
	cut := req.Cut.WALCut
	hb := make([]byte, store.WALHeaderSize)
	if n, _ := wal.ReadAt(hb, 0); n < len(hb) {
		req.cutNote = "timestamps: the captured -wal has no header"
		return replayCut{at: req.ReplacedAt}, nil
	}
	h, err := store.ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		req.cutNote = "timestamps: the captured -wal has no valid header"
		return replayCut{at: req.ReplacedAt}, nil
	}
	if h.Salt1 != cut.Salt1 || h.Salt2 != cut.Salt2 {
		req.cutNote = fmt.Sprintf("timestamps: the orphan restarted its WAL after the cut (salts %08x-%08x, cut in %08x-%08x)",
			h.Salt1, h.Salt2, cut.Salt1, cut.Salt2)
		return replayCut{at: req.ReplacedAt}, nil
	}
	walBytes := int64(store.WALHeaderSize) + int64(cut.Frame)*store.WALFrameBytes(h.PageSize)
	if size < walBytes {
		req.cutNote = "timestamps: the captured -wal is shorter than the cut"
		return replayCut{at: req.ReplacedAt}, nil
	}
	rows := map[int64]rowKey{}
	if cut.Frame > 0 {
		res, err := walsalvage.Salvage(ctx, wal, walBytes, opts)
		if err != nil {
			return replayCut{}, err
		}
		for _, r := range res.Messages {
			m, err := store.MessageFromColumns(rowValues(r))
			if err != nil {
				return replayCut{}, fmt.Errorf("salvaged message %d at the cut: %w", r.RowID, err)
			}
			rows[m.ID] = keyOf(&m)
		}
	}
	if err := previousAtCut(rows, full); err != nil {
		return replayCut{}, err
	}
	req.cutNote = "wal " + cut.String() + " (page images)"
	return replayCut{at: req.Cut.At, atFrame: rows}, nil
}

// previousAtCut adds to rows, the rows at a cut in the WAL's current
// generation, those the full salvage read from the previous generation's
// frames: all of them were committed before the WAL restarted, so before
// the cut (a writer the rewrite gate stopped right after the restart,
// before its first frame, has its cut at frame 0 and its rows only
// there). A row the prefix also holds keeps the prefix's, newer image.
func previousAtCut(rows map[int64]rowKey, full *walsalvage.Result) error {
	if full == nil || full.Report.Previous == nil {
		return nil
	}
	first := full.Report.Previous.FirstFrame
	for _, r := range full.Messages {
		if r.Frame < first {
			continue
		}
		m, err := store.MessageFromColumns(rowValues(r))
		if err != nil {
			return fmt.Errorf("salvaged message %d of the previous generation: %w", r.RowID, err)
		}
		if _, ok := rows[m.ID]; !ok {
			rows[m.ID] = keyOf(&m)
		}
	}
	return nil
}
