package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// WAL file format constants (https://www.sqlite.org/fileformat.html#walformat).
const (
	WALHeaderSize      = 32
	WALFrameHeaderSize = 24
	// WALMagicLE and WALMagicBE are the two WAL magics; the low bit says
	// in which byte order the checksums read the file's 32-bit words.
	WALMagicLE = 0x377f0682
	WALMagicBE = 0x377f0683
	// WALVersion is the only WAL format version SQLite writes.
	WALVersion = 3007000
)

var (
	// ErrShortHeader means the input is shorter than the header: a torn
	// or truncated file.
	ErrShortHeader = errors.New("short header")
	// ErrBadMagic means the input does not start with the format's magic.
	ErrBadMagic = errors.New("bad magic")
)

// WALHeader is the 32-byte header at the start of a -wal file. All fields
// are stored big-endian whatever the checksum byte order.
type WALHeader struct {
	Magic              uint32
	BigEndianChecksums bool
	Version            uint32
	PageSize           uint32
	CheckpointSeq      uint32
	Salt1, Salt2       uint32
	Checksum1          uint32
	Checksum2          uint32
	// ChecksumValid: the checksum over the first 24 bytes matches. SQLite
	// ignores a WAL whose header checksum is wrong, so its frames are not
	// part of the database.
	ChecksumValid bool
}

// Valid reports whether SQLite would use this header: correct checksum,
// known version and a power-of-two page size in [512, 65536].
func (h WALHeader) Valid() bool {
	return h.ChecksumValid && h.Version == WALVersion && validPageSize(h.PageSize)
}

func validPageSize(n uint32) bool {
	return n >= 512 && n <= 65536 && n&(n-1) == 0
}

// ParseWALHeader decodes a WAL header from the first 32 bytes of b. It
// fails only for short input (ErrShortHeader) or a wrong magic
// (ErrBadMagic); anything else is reported in the fields (ChecksumValid,
// Valid) so a damaged header can still be shown to an operator.
func ParseWALHeader(b []byte) (WALHeader, error) {
	if len(b) < WALHeaderSize {
		return WALHeader{}, fmt.Errorf("wal header: %d of %d bytes: %w", len(b), WALHeaderSize, ErrShortHeader)
	}
	be := binary.BigEndian
	h := WALHeader{
		Magic:         be.Uint32(b[0:]),
		Version:       be.Uint32(b[4:]),
		PageSize:      be.Uint32(b[8:]),
		CheckpointSeq: be.Uint32(b[12:]),
		Salt1:         be.Uint32(b[16:]),
		Salt2:         be.Uint32(b[20:]),
		Checksum1:     be.Uint32(b[24:]),
		Checksum2:     be.Uint32(b[28:]),
	}
	if h.Magic != WALMagicLE && h.Magic != WALMagicBE {
		return WALHeader{}, fmt.Errorf("wal header: magic 0x%08x: %w", h.Magic, ErrBadMagic)
	}
	h.BigEndianChecksums = h.Magic&1 == 1
	s1, s2 := WALChecksum(h.BigEndianChecksums, 0, 0, b[:24])
	h.ChecksumValid = s1 == h.Checksum1 && s2 == h.Checksum2
	return h, nil
}

// WALFrameHeader is the 24-byte header in front of each page in a WAL.
type WALFrameHeader struct {
	PageNumber uint32
	// CommitSize is the database size in pages after this frame's commit,
	// or 0 if the frame is not the last of a transaction.
	CommitSize   uint32
	Salt1, Salt2 uint32
	Checksum1    uint32
	Checksum2    uint32
}

// IsCommit reports whether the frame ends a transaction.
func (f WALFrameHeader) IsCommit() bool { return f.CommitSize != 0 }

// Belongs reports whether the frame carries the salts of h, that is,
// whether it was written after the WAL's last restart. Frames with other
// salts are leftovers that SQLite ignores.
func (f WALFrameHeader) Belongs(h WALHeader) bool {
	return f.Salt1 == h.Salt1 && f.Salt2 == h.Salt2
}

// ParseWALFrameHeader decodes a frame header from the first 24 bytes of b.
// Its checksum covers the previous frame's checksum and this frame's page
// data, so it cannot be verified from the header alone; see WALChecksum.
func ParseWALFrameHeader(b []byte) (WALFrameHeader, error) {
	if len(b) < WALFrameHeaderSize {
		return WALFrameHeader{}, fmt.Errorf("wal frame header: %d of %d bytes: %w", len(b), WALFrameHeaderSize, ErrShortHeader)
	}
	be := binary.BigEndian
	return WALFrameHeader{
		PageNumber: be.Uint32(b[0:]),
		CommitSize: be.Uint32(b[4:]),
		Salt1:      be.Uint32(b[8:]),
		Salt2:      be.Uint32(b[12:]),
		Checksum1:  be.Uint32(b[16:]),
		Checksum2:  be.Uint32(b[20:]),
	}, nil
}

// WALChecksum continues SQLite's WAL checksum (s1, s2) over b, whose length
// must be a multiple of 8, reading 32-bit words big- or little-endian as
// the WAL magic says. A header's checksum starts from (0, 0) over its first
// 24 bytes; a frame's continues from the previous checksum over the first 8
// bytes of its header and then its page.
func WALChecksum(bigEndian bool, s1, s2 uint32, b []byte) (uint32, uint32) {
	var order binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		order = binary.BigEndian
	}
	for i := 0; i+8 <= len(b); i += 8 {
		s1 += order.Uint32(b[i:]) + s2
		s2 += order.Uint32(b[i+4:]) + s1
	}
	return s1, s2
}
