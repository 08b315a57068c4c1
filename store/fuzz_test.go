package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// addGoldenSeeds seeds f with every golden input of component.
func addGoldenSeeds(f *testing.F, component string) {
	ins, _ := filepath.Glob(filepath.Join("testdata", component, "*", "input.bin"))
	if len(ins) == 0 {
		f.Fatalf("no golden inputs for %s", component)
	}
	for _, p := range ins {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseWALHeader(f *testing.F) {
	addGoldenSeeds(f, "walheader")
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseWALHeader(b)
		switch {
		case len(b) < WALHeaderSize:
			if !errors.Is(err, ErrShortHeader) {
				t.Fatalf("short input: %v", err)
			}
		case binary.BigEndian.Uint32(b) != WALMagicLE && binary.BigEndian.Uint32(b) != WALMagicBE:
			if !errors.Is(err, ErrBadMagic) {
				t.Fatalf("magic %#x: %v", binary.BigEndian.Uint32(b), err)
			}
		case err != nil:
			t.Fatalf("good magic, full length: %v", err)
		case h.BigEndianChecksums != (h.Magic == WALMagicBE):
			t.Fatalf("byte order %v for magic %#x", h.BigEndianChecksums, h.Magic)
		}
	})
}

func FuzzParseWALFrameHeader(f *testing.F) {
	addGoldenSeeds(f, "walframe")
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseWALFrameHeader(b)
		if (err != nil) != (len(b) < WALFrameHeaderSize) {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		if err == nil && fr.IsCommit() != (binary.BigEndian.Uint32(b[4:]) != 0) {
			t.Fatal("IsCommit disagrees with the commit size")
		}
	})
}

func FuzzParseMainHeader(f *testing.F) {
	addGoldenSeeds(f, "mainheader")
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseMainHeader(b)
		if err == nil && (len(b) < mainHeaderSize || string(b[:16]) != MainMagic || !validPageSize(h.PageSize)) {
			t.Fatalf("accepted a bad header: %+v", h)
		}
	})
}
