//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// walKeep is how many leading bytes of a pinned -wal of size bytes a
// capture keeps: through the last frame any reader takes from it, the
// WAL's own valid frames (salts and checksum chain, as SQLite's recovery
// walks them) and the previous generation's verified ones beyond
// (walsalvage's Previous). What lies past them is read by nobody, and a
// -wal truncated up to 200 GB (sparse) must not cost a capture minutes of
// hashing zeros while the writers wait frozen.
//
// A file SQLite would not use as a WAL (short, wrong magic, invalid
// header) has no frame anyone takes: it is kept up to its last data
// byte, for an operator to look at.
func walKeep(ctx context.Context, f *os.File, name string, size int64) (int64, error) {
	w, err := walsalvage.ReadWAL(ctx, f, size)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("walk the frames of %s: %w", name, ctx.Err())
		}
		return dataEnd(ctx, f, name, size)
	}
	if err := w.ReadPrevious(ctx, f, size); err != nil {
		return 0, fmt.Errorf("walk the previous generation's frames of %s: %w", name, err)
	}
	ps := int64(w.PageSize())
	end := int64(store.WALHeaderSize)
	if n := len(w.Frames); n > 0 {
		end = w.Frames[n-1].Offset + ps
	}
	if p := w.Previous; p != nil && len(p.Frames) > 0 {
		end = max(end, p.Frames[len(p.Frames)-1].Offset+ps)
	}
	return min(end, size), nil
}

// dataEnd is the end of f's last data extent (size where the filesystem
// cannot tell data from holes): trailing holes hold nothing.
func dataEnd(ctx context.Context, f *os.File, name string, size int64) (int64, error) {
	fd := int(f.Fd())
	end := int64(0)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("find the data of %s: %w", name, err)
		}
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return size, nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return size, nil
		}
		end, off = min(hole, size), hole
	}
	return end, nil
}

// cutAdopted cuts a quarantined -wal, already the capture's own file, to
// its walKeep length and returns it: the bytes past its last frame are
// read by nobody, and hashing a 200 GB sparse tail took minutes. A writer
// the quarantine left it to (resume policy) appends after its own last
// frame, which is before that length.
func (r *captureRun) cutAdopted(name string, size int64) (int64, error) {
	f, err := openatRegular(r.stage, name)
	if err != nil {
		return 0, fmt.Errorf("open quarantined %s: %w", r.stage.join(name), err)
	}
	defer f.Close()
	keep, err := walKeep(r.ctx, f, f.Name(), size)
	if err != nil || keep >= size {
		return size, err
	}
	if err := truncateSame(r.stage, name, f, keep); err != nil {
		return 0, fmt.Errorf("cut quarantined %s to its last frame (%d bytes): %w", f.Name(), keep, err)
	}
	return keep, nil
}

// truncateSame truncates name in d to size through a write fd of its own,
// only if that is the inode f has open (never a file swapped in since).
func truncateSame(d capDir, name string, f *os.File, size int64) error {
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return err
	}
	if err := unix.Fstat(int(f.Fd()), &b); err != nil {
		return err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("%s is not the file read: %w", d.join(name), fileid.ErrIdentityChanged)
	}
	return unix.Ftruncate(fd, size)
}
