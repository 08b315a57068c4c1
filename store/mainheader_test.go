package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func mainHeaderInputs(t *testing.T) map[string][]byte {
	db := hermestest.NewStore(t)
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	v30 := b[:mainHeaderSize]
	clone := func() []byte { return append([]byte(nil), v30...) }
	legacy := clone()
	binary.BigEndian.PutUint16(legacy[16:], 1) // 65536
	legacy[18], legacy[19] = 1, 1
	binary.BigEndian.PutUint32(legacy[68:], 0)
	badMagic := clone()
	copy(badMagic, "SQLite format 2\x00")
	badPage := clone()
	binary.BigEndian.PutUint16(badPage[16:], 1000)
	return map[string][]byte{
		"hermes-v30-wal":  v30,
		"legacy-64k-page": legacy,
		"torn":            clone()[:60],
		"bad-magic":       badMagic,
		"bad-page-size":   badPage,
	}
}

func TestMainHeaderGolden(t *testing.T) {
	runGolden(t, "mainheader",
		[]string{"hermes-v30-wal", "legacy-64k-page", "torn", "bad-magic", "bad-page-size"},
		mainHeaderInputs,
		func(b []byte) (any, error) { return ParseMainHeader(b) })
}

func TestMainHeaderGoldenFacts(t *testing.T) {
	read := func(c string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "mainheader", c, "input.bin"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	h, err := ParseMainHeader(read("hermes-v30-wal"))
	if err != nil || !h.WAL() || h.ApplicationID != hermestest.Generation || h.TextEncoding != 1 {
		t.Errorf("hermes-v30-wal: %+v, %v", h, err)
	}
	h, err = ParseMainHeader(read("legacy-64k-page"))
	if err != nil || h.WAL() || h.PageSize != 65536 {
		t.Errorf("legacy-64k-page: %+v, %v", h, err)
	}
	for c, want := range map[string]error{"torn": ErrShortHeader, "bad-magic": ErrBadMagic, "bad-page-size": ErrBadHeader} {
		if _, err := ParseMainHeader(read(c)); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", c, err, want)
		}
	}
}
