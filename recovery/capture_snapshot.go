//go:build unix

package recovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// SnapshotMain copies the live main file of a sidecar_lost store to dst:
// the main as it is at detection, which the orphan WAL's frames were built
// on, before the new generation's checkpoints change it. It is a reflink
// clone when the filesystem allows, else a pread copy; dst is created
// O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, owned like the main, in a
// directory that is not a symlink nor writable by others, and fsynced with
// that directory. WriteCapture takes dst as CaptureSource.MainSnapshot.
//
// main is an fd the caller already holds on the store's current main (the
// guard's, or the one it pins), and keeps: SnapshotMain never opens
// mainPath, because closing any fd on that inode would drop the POSIX
// locks of the caller's own SQLite connection on it. mainPath is only
// stat'ed, to check that main is still the file at the path.
//
// The contract with the caller, who must hold both for the whole call:
//   - the orphan's holders are stopped, since their checkpoints write into
//     this same main;
//   - a read transaction on the new generation (BEGIN, then a SELECT on the
//     store, ended after SnapshotMain returns). A checkpoint backfills only
//     frames no reader still needs the main's old pages for: a read begun
//     while the new WAL has nothing to backfill reads the main directly and
//     blocks every backfill until it ends, so the caller begins it at
//     detection, before the new writer's first checkpoint.
//
// A main over MainImageMaxBytes is snapshotted as its header only, in a
// sparse file of its size (snapshotHeader), as a capture would keep it.
//
// SnapshotMain checks rather than trusts: it hashes the main again after
// the copy, and a main that changed meanwhile fails with ErrSourceChanged
// (dst is removed; take the snapshot again). Short of space it fails with
// ErrNoSpace and leaves nothing behind.
func SnapshotMain(ctx context.Context, mainPath string, main *os.File, dst string) error {
	return SnapshotMainIn(ctx, mainPath, store.DirID{}, main, dst)
}

// SnapshotMainIn is SnapshotMain for a store whose directory discovery
// recorded as dir (zero: not compared): the check that the fd is still
// the main at its path is made through a handle on that directory (no
// symlink in any component, the same inode and owner), never by name.
func SnapshotMainIn(ctx context.Context, mainPath string, dir store.DirID, main *os.File, dst string) error {
	if main == nil {
		return fmt.Errorf("snapshot of %s: no fd on the main given", mainPath)
	}
	st, err := fstatFile(main)
	if err != nil {
		return fmt.Errorf("snapshot of %s: stat main fd: %w", mainPath, err)
	}
	if !isRegular(&st) {
		return fmt.Errorf("snapshot of %s: the fd is not a regular file", mainPath)
	}
	sd, err := openStoreDir(filepath.Dir(mainPath), dir)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", mainPath, err)
	}
	pst, err := sd.lstat(filepath.Base(mainPath))
	sd.close()
	if err != nil {
		return fmt.Errorf("snapshot of %s: lstat: %w", mainPath, err)
	}
	if fileid.FromStat(&pst) != fileid.FromStat(&st) {
		return fmt.Errorf("snapshot of %s: the fd is %s but the path is now %s: the main was replaced, this is not a sidecar_lost store any more",
			mainPath, fileid.FromStat(&st), fileid.FromStat(&pst))
	}
	d, err := openStorePath(filepath.Dir(dst))
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", mainPath, err)
	}
	defer d.close()
	name := filepath.Base(dst)
	owner := Owner{UID: int(st.Uid), GID: int(st.Gid)}
	if st.Size > MainImageMaxBytes {
		return snapshotHeader(main, mainPath, st.Size, d, name, owner)
	}
	if free := freeBytes(d); free >= 0 && st.Size+freeReserve > free {
		return fmt.Errorf("%w: snapshot of %s needs %d bytes in %s (plus %d kept free), %d available: free at least %d bytes there",
			ErrNoSpace, mainPath, st.Size, d.path, freeReserve, free, st.Size+freeReserve-free)
	}
	c, err := copyIntoDir(ctx, main, mainPath, st.Size, d, name, owner, true)
	if err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("%w: snapshot of %s needs %d bytes in %s: %w", ErrNoSpace, mainPath, st.Size, d.path, err)
		}
		return fmt.Errorf("snapshot of %s: %w", mainPath, err)
	}
	sum, _, err := hashRange(ctx, main, mainPath, st.Size)
	if err == nil && sum != c.sha256 {
		err = fmt.Errorf("%w: %s changed while it was copied (a checkpoint ran): hold the read transaction on the new generation from detection on, then snapshot again", ErrSourceChanged, mainPath)
	}
	if err == nil {
		err = d.sync()
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, name, 0)
		return fmt.Errorf("snapshot of %s: %w", mainPath, err)
	}
	return nil
}

// snapshotHeader is the snapshot of a main over MainImageMaxBytes: as a
// capture keeps only such a main's header, the snapshot holds only its
// first 100 bytes, in a sparse file of the main's size, so the capture
// taken from it records the header and the size and the disk holds a few
// KiB, not a dense copy of gigabytes (a 3 GiB sparse main took 26 s and
// 3 GB in the issue 14 audit). Divert then reads the orphan WAL's own
// page images.
func snapshotHeader(main *os.File, mainPath string, size int64, d capDir, name string, owner Owner) error {
	head, err := readHead(main, sqliteHeaderBytes)
	if err != nil {
		return fmt.Errorf("snapshot of %s: read header: %w", mainPath, err)
	}
	f, err := d.createExcl(name, owner)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", mainPath, err)
	}
	_, err = f.WriteAt(head, 0)
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.sync()
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, name, 0)
		return fmt.Errorf("snapshot header of %s: %w", mainPath, err)
	}
	return nil
}
