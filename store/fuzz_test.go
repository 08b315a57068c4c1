package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The fuzz targets check the header parsers against an independent reading
// of the format (https://www.sqlite.org/fileformat.html): every field is the
// big-endian word at its offset, the checksum is recomputed here with plain
// shifts rather than WALChecksum, and errors are exactly the documented
// ones. Seeds: every golden input, plus testdata/fuzz/<FuzzName>/.

// addGoldenSeeds seeds f with every golden input of component.
func addGoldenSeeds(f *testing.F, component string, extra ...any) {
	ins, _ := filepath.Glob(filepath.Join("testdata", component, "*", "input.bin"))
	if len(ins) == 0 {
		f.Fatalf("no golden inputs for %s", component)
	}
	for _, p := range ins {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]any{b}, extra...)...)
	}
}

// be32 is the big-endian word at off, spelled out so the test does not
// share encoding/binary's call with the code under test.
func be32(b []byte, off int) uint32 {
	return uint32(b[off])<<24 | uint32(b[off+1])<<16 | uint32(b[off+2])<<8 | uint32(b[off+3])
}

// refWALChecksum is the checksum of the file format's section 4.1, over
// whole 8-byte words of b, reading words in the given byte order.
func refWALChecksum(bigEndian bool, s1, s2 uint32, b []byte) (uint32, uint32) {
	word := func(i int) uint32 {
		if bigEndian {
			return be32(b, i)
		}
		return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
	}
	for i := 0; i+8 <= len(b); i += 8 {
		s1 += word(i) + s2
		s2 += word(i+4) + s1
	}
	return s1, s2
}

func putBE32(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2], b[off+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func FuzzParseWALHeader(f *testing.F) {
	addGoldenSeeds(f, "walheader", uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		h, err := ParseWALHeader(b)
		switch {
		case len(b) < WALHeaderSize:
			if !errors.Is(err, ErrShortHeader) {
				t.Fatalf("short input: %v", err)
			}
			return
		case be32(b, 0) != WALMagicLE && be32(b, 0) != WALMagicBE:
			if !errors.Is(err, ErrBadMagic) {
				t.Fatalf("magic %#x: %v", be32(b, 0), err)
			}
			return
		case err != nil:
			t.Fatalf("good magic, full length: %v", err)
		}
		want := WALHeader{
			Magic: be32(b, 0), BigEndianChecksums: be32(b, 0) == WALMagicBE,
			Version: be32(b, 4), PageSize: be32(b, 8), CheckpointSeq: be32(b, 12),
			Salt1: be32(b, 16), Salt2: be32(b, 20), Checksum1: be32(b, 24), Checksum2: be32(b, 28),
		}
		c1, c2 := refWALChecksum(want.BigEndianChecksums, 0, 0, b[:24])
		want.ChecksumValid = c1 == want.Checksum1 && c2 == want.Checksum2
		if h != want {
			t.Fatalf("parsed %+v, the format says %+v", h, want)
		}
		ps := h.PageSize
		if h.Valid() != (h.ChecksumValid && h.Version == WALVersion && ps >= 512 && ps <= 65536 && ps&(ps-1) == 0) {
			t.Fatalf("Valid()=%v for %+v", h.Valid(), h)
		}

		// Sealed with the right checksum, the same header verifies, and
		// changing a salt (the last checksummed words, which no later
		// word can compensate) breaks the checksum again.
		sealed := append([]byte(nil), b[:WALHeaderSize]...)
		putBE32(sealed, 24, c1)
		putBE32(sealed, 28, c2)
		hs, err := ParseWALHeader(sealed)
		if err != nil || !hs.ChecksumValid || hs.Salt1 != h.Salt1 || hs.Version != h.Version {
			t.Fatalf("resealed header: %+v %v", hs, err)
		}
		bit := int(split) % 64
		sealed[16+bit/8] ^= 1 << (bit % 8)
		if hs, _ := ParseWALHeader(sealed); hs.ChecksumValid {
			t.Fatalf("salt bit %d flipped, checksum still valid", bit)
		}

		// WALChecksum continues across any 8-byte boundary, which is what
		// lets a frame's checksum chain from the previous one.
		whole := b[:len(b)&^7]
		cut := (int(split) % (len(whole)/8 + 1)) * 8
		r1, r2 := refWALChecksum(h.BigEndianChecksums, 0, 0, whole)
		a1, a2 := WALChecksum(h.BigEndianChecksums, 0, 0, whole[:cut])
		if g1, g2 := WALChecksum(h.BigEndianChecksums, a1, a2, whole[cut:]); g1 != r1 || g2 != r2 {
			t.Fatalf("checksum split at %d: %08x %08x, want %08x %08x", cut, g1, g2, r1, r2)
		}
		if g1, g2 := WALChecksum(h.BigEndianChecksums, 0, 0, b); g1 != r1 || g2 != r2 {
			t.Fatal("a partial trailing word changed the checksum")
		}

		// The first frame, when the input reaches it, belongs exactly when
		// it carries the header's salts.
		if len(b) >= WALHeaderSize+WALFrameHeaderSize {
			fr, err := ParseWALFrameHeader(b[WALHeaderSize:])
			if err != nil {
				t.Fatal(err)
			}
			same := be32(b, 40) == h.Salt1 && be32(b, 44) == h.Salt2
			if fr.Belongs(h) != same {
				t.Fatalf("Belongs=%v, salts %08x/%08x vs header %08x/%08x", fr.Belongs(h), fr.Salt1, fr.Salt2, h.Salt1, h.Salt2)
			}
		}
	})
}

func FuzzParseWALFrameHeader(f *testing.F) {
	addGoldenSeeds(f, "walframe")
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseWALFrameHeader(b)
		if len(b) < WALFrameHeaderSize {
			if !errors.Is(err, ErrShortHeader) {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		want := WALFrameHeader{PageNumber: be32(b, 0), CommitSize: be32(b, 4), Salt1: be32(b, 8),
			Salt2: be32(b, 12), Checksum1: be32(b, 16), Checksum2: be32(b, 20)}
		if fr != want {
			t.Fatalf("parsed %+v, the format says %+v", fr, want)
		}
		if fr.IsCommit() != (fr.CommitSize != 0) {
			t.Fatal("IsCommit disagrees with the commit size")
		}
		h := WALHeader{Salt1: fr.Salt1, Salt2: fr.Salt2}
		if !fr.Belongs(h) {
			t.Fatal("a frame does not belong to a header with its own salts")
		}
		h.Salt2++
		if fr.Belongs(h) {
			t.Fatal("a frame belongs to a header with another salt2")
		}
		h.Salt1, h.Salt2 = h.Salt1+1, fr.Salt2
		if fr.Belongs(h) {
			t.Fatal("a frame belongs to a header with another salt1")
		}
	})
}

func FuzzParseMainHeader(f *testing.F) {
	addGoldenSeeds(f, "mainheader")
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseMainHeader(b)
		switch {
		case len(b) < mainHeaderSize:
			if !errors.Is(err, ErrShortHeader) {
				t.Fatalf("short input: %v", err)
			}
			return
		case string(b[:16]) != "SQLite format 3\x00":
			if !errors.Is(err, ErrBadMagic) {
				t.Fatalf("magic %q: %v", b[:16], err)
			}
			return
		}
		ps := uint32(b[16])<<8 | uint32(b[17])
		if ps == 1 {
			ps = 65536
		}
		validSize := ps >= 512 && ps <= 65536 && ps&(ps-1) == 0
		if validSize != (err == nil) || (err != nil && !errors.Is(err, ErrBadHeader)) {
			t.Fatalf("page size %d: %v", ps, err)
		}
		want := MainHeader{
			PageSize: ps, WriteVersion: b[18], ReadVersion: b[19], ReservedBytes: b[20],
			FileChangeCounter: be32(b, 24), DatabaseSize: be32(b, 28), FreelistTrunk: be32(b, 32),
			FreelistPages: be32(b, 36), SchemaCookie: be32(b, 40), SchemaFormat: be32(b, 44),
			DefaultCacheSize: int32(be32(b, 48)), LargestRootPage: be32(b, 52), TextEncoding: be32(b, 56),
			UserVersion: int32(be32(b, 60)), IncrementalVacuum: be32(b, 64), ApplicationID: be32(b, 68),
			VersionValidFor: be32(b, 92), SQLiteVersion: be32(b, 96),
		}
		if h != want {
			t.Fatalf("parsed %+v, the format says %+v", h, want)
		}
		if h.WAL() != (b[18] == 2 && b[19] == 2) {
			t.Fatalf("WAL()=%v with versions %d/%d", h.WAL(), b[18], b[19])
		}
	})
}
