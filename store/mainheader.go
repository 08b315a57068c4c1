package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	mainHeaderSize = 100
	// MainMagic starts every SQLite database file.
	MainMagic = "SQLite format 3\x00"
)

// ErrBadHeader means a header has the right magic but a field SQLite would
// reject (an impossible page size).
var ErrBadHeader = errors.New("invalid header")

// MainHeader is the 100-byte header of a SQLite database file
// (https://www.sqlite.org/fileformat.html#the_database_header). Multi-byte
// fields are big-endian.
type MainHeader struct {
	PageSize          uint32 // bytes; the on-disk value 1 means 65536
	WriteVersion      uint8  // 1 legacy (rollback journal), 2 WAL
	ReadVersion       uint8  // 1 legacy, 2 WAL
	ReservedBytes     uint8
	FileChangeCounter uint32
	DatabaseSize      uint32 // in pages; valid only if VersionValidFor == FileChangeCounter
	FreelistTrunk     uint32
	FreelistPages     uint32
	SchemaCookie      uint32
	SchemaFormat      uint32
	DefaultCacheSize  int32
	LargestRootPage   uint32 // non-zero in auto-vacuum databases
	TextEncoding      uint32 // 1 UTF-8, 2 UTF-16le, 3 UTF-16be
	UserVersion       int32
	IncrementalVacuum uint32
	ApplicationID     uint32
	VersionValidFor   uint32
	SQLiteVersion     uint32 // SQLITE_VERSION_NUMBER of the last writer
}

// WAL reports whether the header puts the database in WAL mode.
func (h MainHeader) WAL() bool { return h.WriteVersion == 2 && h.ReadVersion == 2 }

// ParseMainHeader decodes a database header from the first 100 bytes of b:
// ErrShortHeader if b is shorter, ErrBadMagic if it does not start with
// "SQLite format 3\0", ErrBadHeader for a page size SQLite would refuse.
func ParseMainHeader(b []byte) (MainHeader, error) {
	if len(b) < mainHeaderSize {
		return MainHeader{}, fmt.Errorf("database header: %d of %d bytes: %w", len(b), mainHeaderSize, ErrShortHeader)
	}
	if string(b[:16]) != MainMagic {
		return MainHeader{}, fmt.Errorf("database header: magic %q: %w", b[:16], ErrBadMagic)
	}
	be := binary.BigEndian
	h := MainHeader{
		PageSize:          uint32(be.Uint16(b[16:])),
		WriteVersion:      b[18],
		ReadVersion:       b[19],
		ReservedBytes:     b[20],
		FileChangeCounter: be.Uint32(b[24:]),
		DatabaseSize:      be.Uint32(b[28:]),
		FreelistTrunk:     be.Uint32(b[32:]),
		FreelistPages:     be.Uint32(b[36:]),
		SchemaCookie:      be.Uint32(b[40:]),
		SchemaFormat:      be.Uint32(b[44:]),
		DefaultCacheSize:  int32(be.Uint32(b[48:])),
		LargestRootPage:   be.Uint32(b[52:]),
		TextEncoding:      be.Uint32(b[56:]),
		UserVersion:       int32(be.Uint32(b[60:])),
		IncrementalVacuum: be.Uint32(b[64:]),
		ApplicationID:     be.Uint32(b[68:]),
		VersionValidFor:   be.Uint32(b[92:]),
		SQLiteVersion:     be.Uint32(b[96:]),
	}
	if h.PageSize == 1 {
		h.PageSize = 65536
	}
	if !validPageSize(h.PageSize) {
		return h, fmt.Errorf("database header: page size %d: %w", be.Uint16(b[16:]), ErrBadHeader)
	}
	return h, nil
}
