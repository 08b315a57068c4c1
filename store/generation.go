package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/stateguard/stateguard/fileid"
)

// Generation is the identity of a store's files at one moment: which inodes
// are at the main, -wal and -shm paths, and what the headers say. Two
// generations that differ mean some process replaced, removed or reset part
// of the store.
type Generation struct {
	Main, WAL, SHM fileid.State
	// WALHeader is nil when there is no -wal, it is shorter than a header
	// (a TRUNCATE checkpoint leaves it empty) or its magic is wrong.
	WALHeader *WALHeader
	// AppID is the main file's application_id; Hermes mirrors its
	// db_file_generation into it. It is informational and not part of
	// Diff: the main file's header lags the WAL until a checkpoint, so a
	// change shows up at an unrelated moment.
	AppID        uint32
	MainHeaderOK bool
}

// ErrFileChanged means a store file kept changing between lstat and open,
// even after retries; the caller should simply try again later.
var ErrFileChanged = errors.New("file changed while reading its header")

const generationAttempts = 5

// ReadGeneration lstats the main file, -wal and -shm of the store at
// mainPath and reads the WAL and main headers. Each header is read through
// an fd opened O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC whose fstat identity
// must equal the lstat identity; if a file changed in between, the whole
// read is retried a few times, then ErrFileChanged is returned.
//
// Safety: those fds are closed before ReadGeneration returns, and close(2)
// drops every POSIX lock this process holds on the inode. Callers must not
// call ReadGeneration while this process holds a SQLite connection using
// POSIX locks on the same store: the connection's locks would silently
// vanish. The agent never does; its own guard uses OFD locks, which close
// does not cancel (modernc.OFDLocking would make SQLite's locks immune too).
//
// On error the returned Generation still holds the lstat facts that were
// learned, so a caller can report them. A main file that is not a regular
// file is such an error (it is never opened). A missing file is not an
// error: its fileid.State has Exists false.
//
// The files are reached through a handle on mainPath's directory, taken
// once with no symlink in any component (OpenDir, nothing recorded to
// compare with): a directory swapped for a link is refused, and one
// swapped during the read does not redirect it.
func ReadGeneration(mainPath string) (Generation, error) {
	return Store{Path: mainPath}.ReadGeneration()
}

func readGenerationRetry(d genFiles, name string) (Generation, error) {
	var g Generation
	var err error
	for i := range generationAttempts {
		g, err = readGeneration(d, name, i == generationAttempts-1)
		if !errors.Is(err, errChanged) {
			return g, err
		}
	}
	return g, fmt.Errorf("read generation %s: %w", d.join(name), ErrFileChanged)
}

var errChanged = errors.New("identity changed between lstat and open")

// genFiles is where readGeneration finds a store's files: through its
// directory's handle (inDir).
type genFiles interface {
	lstat(name string) (fileid.State, error)
	open(name string) (*os.File, error) // O_NOFOLLOW|O_NONBLOCK, read-only
	join(name string) string
}

// readGeneration reads one generation. Unless last, a WAL header with a
// bad checksum is retried: SQLite always writes a valid one, so a bad one
// is most likely a read torn by a concurrent header write.
func readGeneration(d genFiles, name string, last bool) (Generation, error) {
	var g Generation
	var err error
	if g.Main, err = d.lstat(name); err != nil {
		return g, err
	}
	if g.WAL, err = d.lstat(name + "-wal"); err != nil {
		return g, err
	}
	if g.SHM, err = d.lstat(name + "-shm"); err != nil {
		return g, err
	}
	mainPath := d.join(name)
	if g.Main.Exists && !g.Main.Regular() {
		return g, fmt.Errorf("read generation %s: main is a %v: %w", mainPath, fileType(g.Main.Mode), ErrNotRegular)
	}
	if g.WAL.Exists && !g.WAL.Regular() {
		return g, fmt.Errorf("read generation %s-wal: %v: %w", mainPath, fileType(g.WAL.Mode), ErrNotRegular)
	}
	if g.Main.Exists {
		b, err := readHeader(d, name, g.Main, mainHeaderSize)
		if err != nil {
			return g, err
		}
		if h, err := ParseMainHeader(b); err == nil {
			g.MainHeaderOK = true
			g.AppID = h.ApplicationID
		}
	}
	if g.WAL.Exists {
		b, err := readHeader(d, name+"-wal", g.WAL, WALHeaderSize)
		if err != nil {
			return g, err
		}
		if h, err := ParseWALHeader(b); err == nil {
			if !h.ChecksumValid && !last {
				return g, errChanged
			}
			g.WALHeader = &h
		}
	}
	return g, nil
}

// readHeader reads up to n bytes from the start of name, through an fd
// whose identity must be want's. It returns errChanged if the name now
// leads to another file (or none).
func readHeader(d genFiles, name string, want fileid.State, n int) ([]byte, error) {
	path := d.join(name)
	f, err := d.open(name)
	if errors.Is(err, fs.ErrNotExist) || isLoop(err) {
		return nil, errChanged
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close() // see ReadGeneration about close and POSIX locks
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fstat %s: %w", path, err)
	}
	if got := fileid.Of(fi); got.ID != want.ID || !got.Mode.IsRegular() {
		return nil, errChanged
	}
	b := make([]byte, n)
	m, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read header %s: %w", path, err)
	}
	return b[:m], nil
}

// Change is the set of differences between two generations of a store.
type Change uint16

const (
	MainReplaced Change = 1 << iota // a different inode is at the main path
	MainRemoved                     // the main file is gone
	MainCreated                     // a main file appeared where there was none
	WALReplaced
	WALRemoved
	WALCreated
	SHMReplaced
	SHMRemoved
	SHMCreated
	// WALReset: the same -wal inode was restarted (new salts or checkpoint
	// sequence) or truncated: every frame it held before is void.
	WALReset
)

var changeNames = []string{
	"main-replaced", "main-removed", "main-created",
	"wal-replaced", "wal-removed", "wal-created",
	"shm-replaced", "shm-removed", "shm-created",
	"wal-reset",
}

// Same reports whether nothing changed.
func (c Change) Same() bool { return c == 0 }

// Has reports whether every bit of x is set in c.
func (c Change) Has(x Change) bool { return c&x == x }

func (c Change) String() string {
	if c == 0 {
		return "same"
	}
	var parts []string
	for i, n := range changeNames {
		if c&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if rest := c &^ (1<<len(changeNames) - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint16(rest)))
	}
	return strings.Join(parts, "|")
}

// Diff says how g differs from the older generation old.
func (g Generation) Diff(old Generation) Change {
	var c Change
	c |= fileChange(old.Main, g.Main, MainReplaced, MainRemoved, MainCreated)
	c |= fileChange(old.WAL, g.WAL, WALReplaced, WALRemoved, WALCreated)
	c |= fileChange(old.SHM, g.SHM, SHMReplaced, SHMRemoved, SHMCreated)
	if old.WAL.Exists && g.WAL.Exists && old.WAL.ID == g.WAL.ID && old.WALHeader != nil {
		// nil→header is the first frame of a fresh WAL, not a reset;
		// header→nil is a truncation.
		if h := g.WALHeader; h == nil || h.Salt1 != old.WALHeader.Salt1 || h.Salt2 != old.WALHeader.Salt2 ||
			h.CheckpointSeq != old.WALHeader.CheckpointSeq {
			c |= WALReset
		}
	}
	return c
}

func fileChange(old, cur fileid.State, replaced, removed, created Change) Change {
	switch {
	case old.Exists && !cur.Exists:
		return removed
	case !old.Exists && cur.Exists:
		return created
	case old.Exists && cur.ID != old.ID:
		return replaced
	}
	return 0
}
