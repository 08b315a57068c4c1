package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// realWAL runs the test writer until it has committed and returns the
// start of its -wal: the file header and the first frame header.
func realWAL(t *testing.T) []byte {
	t.Helper()
	db := filepath.Join(t.TempDir(), "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Count: 3, Linger: true})
	defer w.Kill()
	b, err := os.ReadFile(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < WALHeaderSize+WALFrameHeaderSize {
		t.Fatalf("writer's WAL is %d bytes", len(b))
	}
	return b[:WALHeaderSize+WALFrameHeaderSize]
}

// setWALChecksum rewrites the header checksum of h for the byte order its
// magic names.
func setWALChecksum(h []byte) {
	s1, s2 := WALChecksum(binary.BigEndian.Uint32(h)&1 == 1, 0, 0, h[:24])
	binary.BigEndian.PutUint32(h[24:], s1)
	binary.BigEndian.PutUint32(h[28:], s2)
}

func walHeaderInputs(t *testing.T) map[string][]byte {
	le := realWAL(t)[:WALHeaderSize]
	if binary.BigEndian.Uint32(le) != WALMagicLE {
		t.Fatalf("this machine's SQLite wrote magic %#x; the valid-le case needs a little-endian host", binary.BigEndian.Uint32(le))
	}
	clone := func() []byte { return append([]byte(nil), le...) }
	be := clone()
	binary.BigEndian.PutUint32(be, WALMagicBE)
	setWALChecksum(be)
	badMagic := clone()
	binary.BigEndian.PutUint32(badMagic, 0xdeadbeef)
	badSum := clone()
	badSum[31] ^= 0x01
	return map[string][]byte{
		"valid-le":     le,
		"valid-be":     be,
		"torn":         clone()[:20],
		"empty":        {},
		"bad-magic":    badMagic,
		"bad-checksum": badSum,
	}
}

func TestWALHeaderGolden(t *testing.T) {
	runGolden(t, "walheader",
		[]string{"valid-le", "valid-be", "torn", "empty", "bad-magic", "bad-checksum"},
		walHeaderInputs,
		func(b []byte) (any, error) { return ParseWALHeader(b) })
}

func TestWALFrameHeaderGolden(t *testing.T) {
	runGolden(t, "walframe",
		[]string{"first-frame", "torn"},
		func(t *testing.T) map[string][]byte {
			fr := realWAL(t)[WALHeaderSize:]
			return map[string][]byte{"first-frame": fr, "torn": fr[:10]}
		},
		func(b []byte) (any, error) { return ParseWALFrameHeader(b) })
}

// TestWALHeaderGoldenFacts pins the facts the golden files must show, so an
// -update run that produced nonsense cannot pass unnoticed.
func TestWALHeaderGoldenFacts(t *testing.T) {
	read := func(c string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "walheader", c, "input.bin"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []string{"valid-le", "valid-be"} {
		h, err := ParseWALHeader(read(c))
		if err != nil || !h.Valid() || h.BigEndianChecksums != (c == "valid-be") {
			t.Errorf("%s: %+v, %v; want a valid header", c, h, err)
		}
	}
	if h, err := ParseWALHeader(read("bad-checksum")); err != nil || h.ChecksumValid || h.Valid() {
		t.Errorf("bad-checksum: %+v, %v", h, err)
	}
	if _, err := ParseWALHeader(read("torn")); !errors.Is(err, ErrShortHeader) {
		t.Errorf("torn: %v, want ErrShortHeader", err)
	}
	if _, err := ParseWALHeader(read("bad-magic")); !errors.Is(err, ErrBadMagic) {
		t.Errorf("bad-magic: %v, want ErrBadMagic", err)
	}
}

// TestLiveWALFrames checks the parsers against what SQLite writes now: the
// header checksum is valid and the first frame carries the header's salts
// and a checksum that continues the header's.
func TestLiveWALFrames(t *testing.T) {
	b := realWAL(t)
	h, err := ParseWALHeader(b)
	if err != nil || !h.Valid() {
		t.Fatalf("live WAL header %+v: %v", h, err)
	}
	f, err := ParseWALFrameHeader(b[WALHeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	if !f.Belongs(h) || f.PageNumber == 0 {
		t.Fatalf("frame %+v does not belong to header %+v", f, h)
	}
}
