//go:build unix

package recovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// cloneFile is cloneOrCreate; a test replaces it to make a clone that
// cannot be read back, which no real filesystem produces on demand.
var cloneFile = cloneOrCreate

// captureChunk is the pread size: large enough that a copy is bound by
// the disk, small enough that a cancelled context is noticed quickly.
const captureChunk = 1 << 20

// copiedFile is one file written into a capture or a private copy.
type copiedFile struct {
	name   string
	bytes  int64
	sha256 string
	origin string    // "reflink", "copy", "link", "quarantined"
	head   []byte    // the first bytes (up to a SQLite header), for the manifest
	id     fileid.ID // identity of the written file
}

// ErrSourceChanged marks a source whose size changed while it was copied:
// a process still writes to it, so the copy cannot be trusted.
var ErrSourceChanged = errors.New("source changed while it was copied")

// copyIntoDir writes exactly size bytes of src (read with pread; src is
// never moved, truncated or closed) into a new file name in d, as a
// reflink clone when allowClone and the filesystem can, and fsyncs it.
// The sha256 is of the bytes in the new file. On error nothing is left
// behind.
func copyIntoDir(ctx context.Context, src *os.File, srcName string, size int64, d capDir, name string, owner Owner, allowClone bool) (c copiedFile, err error) {
	return copyPrefixIntoDir(ctx, src, srcName, size, size, d, name, owner, allowClone)
}

// copyPrefixIntoDir is copyIntoDir of src's first keep bytes, src being
// size bytes (what must not change while it is copied).
func copyPrefixIntoDir(ctx context.Context, src *os.File, srcName string, size, keep int64, d capDir, name string, owner Owner, allowClone bool) (c copiedFile, err error) {
	var dst *os.File
	cloned := false
	if allowClone {
		dst, cloned, err = cloneFile(src, d, name, owner)
	} else {
		dst, err = d.createExcl(name, owner)
	}
	if err != nil {
		return c, err
	}
	defer func() {
		if cerr := dst.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", d.join(name), cerr)
		}
		if err != nil {
			_ = unix.Unlinkat(d.fd, name, 0)
		}
	}()
	c = copiedFile{name: name, bytes: keep, origin: "copy"}
	if cloned {
		c.origin = "reflink"
		// No := here: the hash's error must reach the check below, or a
		// clone that cannot be read counts as a good copy with no sha256.
		var st unix.Stat_t
		if st, err = fstatFile(dst); err != nil {
			return c, fmt.Errorf("stat clone %s: %w", d.join(name), err)
		}
		if st.Size != size {
			return c, fmt.Errorf("%w: %s is %d bytes, %d when the capture began", ErrSourceChanged, srcName, st.Size, size)
		}
		if keep < size {
			if err := dst.Truncate(keep); err != nil {
				return c, fmt.Errorf("cut clone %s to %d bytes: %w", d.join(name), keep, err)
			}
		}
		c.sha256, c.head, err = hashRange(ctx, dst, d.join(name), keep)
	} else {
		c.sha256, c.head, err = copyExtents(ctx, dst, d.join(name), src, srcName, keep)
	}
	if err != nil {
		return c, err
	}
	if c.sha256 == "" {
		// Every later check compares against this sum: one that was never
		// computed must not be recorded as if it were.
		return c, fmt.Errorf("copy %s to %s: no sha256 was computed; the copy is not trusted", srcName, d.join(name))
	}
	if err := dst.Sync(); err != nil {
		return c, fmt.Errorf("fsync %s: %w", d.join(name), err)
	}
	if st, err := fstatFile(src); err == nil && st.Size != size {
		return c, fmt.Errorf("%w: %s is %d bytes, %d when the capture began", ErrSourceChanged, srcName, st.Size, size)
	}
	st, err := fstatFile(dst)
	if err != nil {
		return c, fmt.Errorf("stat %s: %w", d.join(name), err)
	}
	c.id = fileid.FromStat(&st)
	return c, nil
}

// copyRange preads size bytes from src into dst, hashing them. A short
// source is an error: a truncated copy with a valid-looking manifest would
// let the caller unpin an orphan that was never fully captured.
func copyRange(ctx context.Context, dst io.Writer, dstName string, src io.ReaderAt, srcName string, size int64) (sum string, head []byte, err error) {
	h := sha256.New()
	buf := make([]byte, min(int64(captureChunk), max(size, 1)))
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", nil, fmt.Errorf("copy %s: %w", srcName, err)
		}
		n, rerr := src.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n > 0 {
			if head == nil {
				head = append([]byte(nil), buf[:min(n, sqliteHeaderBytes)]...)
			}
			h.Write(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return "", nil, fmt.Errorf("write %s: %w", dstName, werr)
			}
			off += int64(n)
		}
		if rerr == io.EOF && off < size {
			return "", nil, fmt.Errorf("%w: short read of %s: %d of %d bytes (the source shrank; it is NOT fully captured)", ErrSourceChanged, srcName, off, size)
		}
		if rerr != nil && rerr != io.EOF {
			return "", nil, fmt.Errorf("read %s at %d: %w", srcName, off, rerr)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), head, nil
}

// copyExtents copies the data extents of the first size bytes of src into
// the new, empty dst at the same offsets, and leaves src's holes as holes
// (dst gets its size at the end): a sparse 1 GiB -wal costs the disk only
// what it holds. Every byte is hashed, a hole as the zeros it reads as.
// Where the filesystem cannot tell data from holes (SEEK_DATA refused),
// the copy is dense, as copyRange.
func copyExtents(ctx context.Context, dst *os.File, dstName string, src *os.File, srcName string, size int64) (sum string, head []byte, err error) {
	fd := int(src.Fd())
	if _, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil && !errors.Is(err, unix.ENXIO) {
		return copyRange(ctx, dst, dstName, src, srcName, size)
	}
	h := sha256.New()
	buf := make([]byte, min(int64(captureChunk), max(size, 1)))
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", nil, fmt.Errorf("copy %s: %w", srcName, err)
		}
		data, end := extentAt(fd, off, size)
		if err := hashZeros(ctx, h, data-off); err != nil {
			return "", nil, fmt.Errorf("copy %s: %w", srcName, err)
		}
		if data >= size {
			break
		}
		for off = data; off < end; {
			n, rerr := src.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if n > 0 {
				if off == 0 {
					head = append([]byte(nil), buf[:min(n, sqliteHeaderBytes)]...)
				}
				h.Write(buf[:n])
				if _, werr := dst.WriteAt(buf[:n], off); werr != nil {
					return "", nil, fmt.Errorf("write %s: %w", dstName, werr)
				}
				off += int64(n)
			}
			if rerr == io.EOF && off < end {
				return "", nil, fmt.Errorf("%w: short read of %s: %d of %d bytes (the source shrank; it is NOT fully captured)", ErrSourceChanged, srcName, off, size)
			}
			if rerr != nil && rerr != io.EOF {
				return "", nil, fmt.Errorf("read %s at %d: %w", srcName, off, rerr)
			}
		}
	}
	if err := dst.Truncate(size); err != nil {
		return "", nil, fmt.Errorf("size %s: %w", dstName, err)
	}
	if head == nil {
		head = make([]byte, min(size, sqliteHeaderBytes)) // it starts with a hole
	}
	return hex.EncodeToString(h.Sum(nil)), head, nil
}

// extentAt is the data extent [data, end) at or after off, within size;
// data is size when only a hole is left.
func extentAt(fd int, off, size int64) (data, end int64) {
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if err != nil { // ENXIO: nothing but a hole up to the end
		return size, size
	}
	data = min(data, size)
	end, err = unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil || end > size {
		end = size
	}
	return data, end
}

var zeroChunk = make([]byte, captureChunk)

// hashZeros hashes n zero bytes (a hole as it reads), stopping when ctx
// is done: a hole can be any size.
func hashZeros(ctx context.Context, h hash.Hash, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(n, int64(len(zeroChunk)))
		_, _ = h.Write(zeroChunk[:k]) // a hash never returns an error
		n -= k
	}
	return nil
}

// hashRange hashes the first size bytes of r.
func hashRange(ctx context.Context, r io.ReaderAt, name string, size int64) (string, []byte, error) {
	return copyRange(ctx, io.Discard, "", r, name, size)
}

// writeHeaderFile writes the 100-byte main header as name in d, fsynced.
func writeHeaderFile(d capDir, name string, head []byte, owner Owner) (copiedFile, error) {
	f, err := d.createExcl(name, owner)
	if err != nil {
		return copiedFile{}, err
	}
	_, err = f.Write(head)
	if err == nil {
		err = f.Sync()
	}
	var st unix.Stat_t
	if err == nil {
		st, err = fstatFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, name, 0)
		return copiedFile{}, fmt.Errorf("write %s: %w", d.join(name), err)
	}
	sum := sha256.Sum256(head)
	return copiedFile{name: name, bytes: int64(len(head)), sha256: hex.EncodeToString(sum[:]), origin: "copy", head: head, id: fileid.FromStat(&st)}, nil
}

// readHead reads up to n bytes at offset 0 of f.
func readHead(f io.ReaderAt, n int) ([]byte, error) {
	b := make([]byte, n)
	m, err := f.ReadAt(b, 0)
	if err == io.EOF {
		err = nil
	}
	return b[:m], err
}
