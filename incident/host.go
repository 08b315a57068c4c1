package incident

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// Host is Procs on the real host: pidfd signals, /proc pins, OFD locks.
type Host struct{}

func (Host) Thaw(r holders.ProcRef) error      { return holders.Thaw(r) }
func (Host) Terminate(r holders.ProcRef) error { return holders.Terminate(r) }
func (Host) Kill(r holders.ProcRef) error      { return holders.Kill(r) }

// Alive reports whether the process exists and is not a zombie.
func (Host) Alive(r holders.ProcRef) bool {
	st, err := holders.State(r)
	return err == nil && st != 'Z' && st != 'X'
}

func (Host) WaitStopped(ctx context.Context, r holders.ProcRef) error {
	return holders.WaitStopped(ctx, r)
}

func (Host) WaitGone(ctx context.Context, r holders.ProcRef) error { return holders.WaitGone(ctx, r) }

func (Host) Pin(pid int, f holders.Held) (*os.File, error) {
	if f.FD >= 0 {
		return holders.Pin(pid, f.FD, f.ID)
	}
	return holders.PinMapped(pid, f.ID)
}

func (Host) LockPin(role holders.Role, f *os.File) error {
	switch role {
	case holders.RoleMain:
		return holders.LockMainShared(f)
	case holders.RoleSHM:
		return holders.LockSHMRead(f)
	}
	return nil
}

// Recovery is Salvage done by package recovery.
type Recovery struct {
	Log *slog.Logger // nil: discard
}

// Snapshot copies the pinned main under a read transaction on the new
// generation: while it is held no checkpoint can change the pages the
// orphan WAL was built on.
func (r Recovery) Snapshot(ctx context.Context, dbPath string, main *os.File, dst string) error {
	end, err := store.BeginRead(ctx, dbPath)
	if err != nil && r.Log != nil {
		// A snapshot without it is still better than none.
		r.Log.Warn("no read transaction on the new generation; snapshotting anyway", "subsystem", "incident",
			"store", dbPath, "err", err)
	}
	err = recovery.SnapshotMain(ctx, dbPath, main, dst)
	if end != nil {
		end()
	}
	return err
}

// FinishBackfill opens the shared main writable by its path, refusing it
// unless it is still the pinned inode, and finishes the interrupted
// checkpoint. The agent's SQLite connections use OFD locks, so closing
// this fd cancels none of them.
func (Recovery) FinishBackfill(ctx context.Context, dbPath string, main, wal, shm *os.File) (recovery.BackfillReport, error) {
	rw, err := os.OpenFile(dbPath, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return recovery.BackfillReport{}, fmt.Errorf("finish checkpoint: open %s: %w", dbPath, err)
	}
	defer rw.Close()
	if !sameFile(rw, main) {
		return recovery.BackfillReport{}, fmt.Errorf("finish checkpoint: %s is no longer the pinned main: left as it is", dbPath)
	}
	return recovery.FinishInterruptedBackfill(ctx, dbPath, recovery.BackfillSource{Main: rw, WAL: wal, SHM: shm})
}

func (Recovery) Stage(r recovery.CaptureRequest) (string, error) { return recovery.StageCapture(r) }

func (Recovery) Quarantine(dbPath, staging string, want map[string]fileid.ID) ([]string, error) {
	return recovery.QuarantineSidecars(dbPath, staging, want)
}

func (Recovery) Capture(ctx context.Context, src recovery.CaptureSource, r recovery.CaptureRequest) (recovery.Capture, error) {
	return recovery.WriteCapture(ctx, src, r)
}

func (Recovery) Divert(ctx context.Context, r recovery.DivertRequest) (recovery.DivertReport, error) {
	return recovery.Divert(ctx, r)
}

func (Recovery) DivertWALImages(ctx context.Context, r recovery.DivertRequest) (recovery.DivertReport, *walsalvage.Report, error) {
	return recovery.DivertWALImages(ctx, r)
}

func sameFile(a, b *os.File) bool {
	fa, errA := a.Stat()
	fb, errB := b.Stat()
	return errA == nil && errB == nil && fileid.Of(fa).ID == fileid.Of(fb).ID
}
