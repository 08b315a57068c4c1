//go:build unix

package recovery

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/store"
)

// FrameCut is the exact replacement point of a replaced or mispaired
// store: the orphan WAL's last committed frame when the agent saw the
// main change (store.WALCut), and when that was (At, no margin). With it
// the divert replays a missing row unless the orphan had committed it by
// the cut and it is stamped at or before At: a row committed after the
// replacement comes back whatever its timestamp, and a row the restore
// rolled back on purpose stays rolled back even if stamped a moment
// before the restore.
type FrameCut struct {
	store.WALCut
	At time.Time `json:"at"`
}

// replayCut decides which missing rows a restore rolled back on purpose
// (pre-replacement) and which the orphan wrote after it (replayed).
type replayCut struct {
	// at: rows stamped after it are replayed; zero replays every missing
	// row (sidecar_lost).
	at time.Time
	// atFrame, when not nil, is every row of the capture as it was at the
	// frame cut, by id: only those may be pre-replacement.
	atFrame map[int64]rowKey
}

func (c replayCut) pre(m *store.Message, k rowKey) bool {
	if c.at.IsZero() {
		return false
	}
	if m.Timestamp.Valid && m.Timestamp.Float64 > float64(c.at.UnixNano())/1e9 {
		return false
	}
	if c.atFrame == nil {
		return true
	}
	kk, ok := c.atFrame[m.ID]
	return ok && kk == k
}

// rowsAtCut opens the capture as it was at the frame cut (its main plus
// the WAL's frames up to the cut, on a private copy) and returns its
// rows by id. It returns nil and why when the capture cannot show that
// state: the WAL was restarted since the cut (other salts), the orphan
// checkpointed frames past the cut into its main (the wal-index's
// nBackfill, which needs the captured -shm), or the WAL is shorter than
// the cut. The caller then falls back to the timestamp rule.
func rowsAtCut(ctx context.Context, req *DivertRequest, copyPath, tmpDir string) (map[int64]rowKey, string, error) {
	cut := req.Cut.WALCut
	info, err := openCapture(ctx, req.Capture, false)
	if err != nil {
		return nil, "", err
	}
	if info.WAL == "" {
		if cut.Frame == 0 {
			return nil, "the capture has no -wal and nothing was committed at the cut", nil
		}
		return nil, "the capture has no -wal", nil
	}
	wal, err := info.open(info.WAL)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", info.WAL, err)
	}
	defer wal.Close()
	hb := make([]byte, store.WALHeaderSize)
	if n, _ := wal.ReadAt(hb, 0); n < len(hb) {
		return nil, "the captured -wal has no header", nil
	}
	h, err := store.ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		return nil, "the captured -wal has no valid header", nil
	}
	if h.Salt1 != cut.Salt1 || h.Salt2 != cut.Salt2 {
		return nil, fmt.Sprintf("the orphan restarted its WAL after the cut (salts %08x-%08x, cut in %08x-%08x)", h.Salt1, h.Salt2, cut.Salt1, cut.Salt2), nil
	}
	if info.SHM == "" {
		return nil, "the capture has no -shm to say what was checkpointed", nil
	}
	shm, err := info.open(info.SHM)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", info.SHM, err)
	}
	defer shm.Close()
	bl, err := store.ReadWALBacklog(wal, shm)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", info.WAL, err)
	}
	if !bl.IndexOK {
		return nil, "the captured -shm does not describe its -wal", nil
	}
	if bl.Backfilled > cut.Frame {
		return nil, fmt.Sprintf("the orphan checkpointed frame %d, past the cut, into its main", bl.Backfilled), nil
	}
	walBytes := int64(store.WALHeaderSize) + int64(cut.Frame)*store.WALFrameBytes(h.PageSize)
	if st, err := wal.Stat(); err != nil || st.Size() < walBytes {
		return nil, "the captured -wal is shorter than the cut", nil
	}
	cd, _, err := makePrivateDir(tmpDir, cutPrefix)
	if err != nil {
		return nil, "", fmt.Errorf("copy of %s at the cut: %w", req.Capture, err)
	}
	cd.close()
	dir := cd.path
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, filepath.Base(copyPath))
	if err := copyPrefix(openNoFollow, copyPath, db, -1); err != nil {
		return nil, "", err
	}
	if cut.Frame > 0 {
		if err := copyPrefix(info.open, info.WAL, db+"-wal", walBytes); err != nil {
			return nil, "", err
		}
	}
	rows, err := readAllRows(ctx, db)
	if err != nil {
		return nil, "", fmt.Errorf("capture at %s: %w", cut, err)
	}
	return rows, "", nil
}

// copyPrefix copies the first n bytes of src (all of it when n < 0),
// opened with open, to a new file dst of the agent's own.
func copyPrefix(open func(string) (*os.File, error), src, dst string, n int64) error {
	in, err := open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	var r io.Reader = in
	if n >= 0 {
		r = io.LimitReader(in, n)
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// readAllRows reads every message of the database at db by id.
func readAllRows(ctx context.Context, db string) (map[int64]rowKey, error) {
	conn, err := sql.Open("sqlite", privateCopyDSN(db))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetMaxOpenConns(1)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	sids, err := captureSessions(ctx, tx)
	if err != nil {
		return nil, err
	}
	out := map[int64]rowKey{}
	for _, sid := range sids {
		ms, err := store.ReadMessages(ctx, tx, sid)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", sid, err)
		}
		for i := range ms {
			out[ms[i].ID] = keyOf(&ms[i])
		}
	}
	return out, nil
}
