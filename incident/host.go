package incident

import (
	"context"
	"log/slog"
	"os"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// Host is Procs on the real host: pidfd signals, /proc pins, OFD locks.
// Dir is the store's directory as discovery recorded it: pins open as its
// owner (zero: as the agent).
type Host struct{ Dir store.DirID }

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

func (Host) Writes(r holders.ProcRef, id fileid.ID) bool { return holders.Writes(r, id) }

// Pin opens the agent's fd on an orphan inode f of pid, as the store's
// owner: root agentd never keeps open a file that owner could not read.
func (h Host) Pin(pid int, f holders.Held) (*os.File, error) {
	as := func(open func() error) error { return open() }
	if !h.Dir.IsZero() {
		as = func(open func() error) error { return store.AsOwner(h.Dir.UID, h.Dir.GID, open) }
	}
	if f.FD >= 0 {
		return holders.PinAs(pid, f.FD, f.ID, as)
	}
	return holders.PinMappedAs(pid, f.ID, as)
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

// HoldCheckpoint keeps an orphan's own checkpoints from running past its
// incident's frame cut (holders.LockSHMCheckpoint).
func (Host) HoldCheckpoint(shm *os.File) error { return holders.LockSHMCheckpoint(shm) }

// Recovery is Salvage done by package recovery, for one store.
//
// Every step runs as the owner of the store's directory (store.AsOwner)
// and is refused unless the directory is still the one discovery recorded
// (Dir): the kernel then refuses anything the owner could not do
// themselves, whatever they swap under the agent, and the hardened unit
// without CAP_DAC_OVERRIDE can still write into the owner's 0700 home.
type Recovery struct {
	Log *slog.Logger // nil: discard
	// Dir is the store directory as discovery recorded it; zero for a
	// store known only from the journal (no-symlink opens, no owner).
	Dir store.DirID
}

// asOwner runs fn as the directory's owner; unknown: as the agent.
func (r Recovery) asOwner(fn func() error) error {
	if r.Dir.IsZero() {
		return fn()
	}
	return store.AsOwner(r.Dir.UID, r.Dir.GID, fn)
}

// Snapshot copies the pinned main under a read transaction on the new
// generation: while it is held no checkpoint can change the pages the
// orphan WAL was built on.
func (r Recovery) Snapshot(ctx context.Context, dbPath string, main *os.File, dst string) error {
	// As the owner, as every SQLite open of the agent's on a user's store:
	// root's connection would read what the owner may not.
	var end func()
	err := r.asOwner(func() (err error) { end, err = store.BeginRead(ctx, dbPath); return err })
	if err != nil && r.Log != nil {
		// A snapshot without it is still better than none.
		r.Log.Warn("no read transaction on the new generation; snapshotting anyway", "subsystem", "incident",
			"store", dbPath, "err", err)
	}
	err = r.asOwner(func() error { return recovery.SnapshotMainIn(ctx, dbPath, r.Dir, main, dst) })
	if end != nil {
		end()
	}
	return err
}

// FinishBackfill finishes the interrupted checkpoint through the store
// directory's handle (recovery.FinishBackfill): the main is opened for
// writing there, never by its name, and only if it is the pinned inode.
// The agent's SQLite connections use OFD locks, so closing that fd
// cancels none of them.
func (Recovery) FinishBackfill(ctx context.Context, st store.Store, main, wal, shm *os.File) (recovery.BackfillReport, error) {
	return recovery.FinishBackfill(ctx, st, main, wal, shm)
}

func (r Recovery) Stage(req recovery.CaptureRequest) (dir string, err error) {
	req.Dir = r.Dir
	err = r.asOwner(func() (err error) { dir, err = recovery.StageCapture(req); return err })
	return dir, err
}

func (r Recovery) Quarantine(dbPath, staging string, want map[string]fileid.ID) (moved []string, err error) {
	err = r.asOwner(func() (err error) {
		moved, err = recovery.QuarantineSidecarsIn(dbPath, r.Dir, staging, want)
		return err
	})
	return moved, err
}

func (r Recovery) Capture(ctx context.Context, src recovery.CaptureSource, req recovery.CaptureRequest) (c recovery.Capture, err error) {
	req.Dir = r.Dir
	err = r.asOwner(func() (err error) { c, err = recovery.WriteCapture(ctx, src, req); return err })
	return c, err
}

func (r Recovery) Divert(ctx context.Context, req recovery.DivertRequest) (rep recovery.DivertReport, err error) {
	req.Dir = r.Dir
	err = r.asOwner(func() (err error) { rep, err = recovery.Divert(ctx, req); return err })
	return rep, err
}

func (r Recovery) DivertWALImages(ctx context.Context, req recovery.DivertRequest) (rep recovery.DivertReport, ws *walsalvage.Report, err error) {
	req.Dir = r.Dir
	err = r.asOwner(func() (err error) { rep, ws, err = recovery.DivertWALImages(ctx, req); return err })
	return rep, ws, err
}

// RemoveCapture removes a resolved incident's capture of st, as the
// directory's owner (recovery.RemoveCapture).
func (r Recovery) RemoveCapture(st store.Store, dir string) (freed int64, err error) {
	if st.DirID.IsZero() {
		st.DirID = r.Dir
	}
	err = r.asOwner(func() (err error) { freed, err = recovery.RemoveCapture(st, dir); return err })
	return freed, err
}
