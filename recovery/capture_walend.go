//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

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
