package walsalvage

import (
	"math"
	"testing"
)

func TestVarint(t *testing.T) {
	cases := []struct {
		in []byte
		v  uint64
		n  int
	}{
		{[]byte{0x00}, 0, 1},
		{[]byte{0x7f}, 127, 1},
		{[]byte{0x81, 0x00}, 128, 2},
		{[]byte{0xff, 0x7f}, 0x3fff, 2},
		{[]byte{0x81, 0x80, 0x00}, 1 << 14, 3},
		// Nine bytes: the last one carries 8 bits.
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.MaxUint64, 9},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 1, 9},
		{[]byte{0x81}, 0, 0},
		{[]byte{}, 0, 0},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, 0},
	}
	for _, c := range cases {
		if v, n := varint(c.in); v != c.v || n != c.n {
			t.Errorf("varint(% x) = %d, %d; want %d, %d", c.in, v, n, c.v, c.n)
		}
	}
}

// TestDecodeRecord decodes a hand-built record with one field of every
// serial type.
func TestDecodeRecord(t *testing.T) {
	body := []byte{
		0x85,       // int8 -123
		0x80, 0x00, // int16 -32768
		0x7f, 0xff, 0xff, // int24 8388607
		0xff, 0xff, 0xff, 0xfe, // int32 -2
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, // int48 2^32
		0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // int64 max
		0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // 1.5
		'h', 'i', // text "hi"
		0x00, 0xff, // blob
	}
	types := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13 + 2*2, 12 + 2*2}
	rec := append([]byte{byte(len(types) + 1)}, types...)
	rec = append(rec, body...)
	vals, err := decodeRecord(rec, encUTF8)
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{{}, IntValue(-123), IntValue(-32768), IntValue(8388607), IntValue(-2), IntValue(1 << 32),
		IntValue(math.MaxInt64), RealValue(1.5), IntValue(0), IntValue(1), TextValue("hi"), BlobValue([]byte{0, 0xff})}
	if len(vals) != len(want) {
		t.Fatalf("%d values, want %d", len(vals), len(want))
	}
	for i := range want {
		if vals[i].String() != want[i].String() {
			t.Errorf("field %d = %v, want %v", i, vals[i], want[i])
		}
	}
	for _, bad := range [][]byte{
		{},
		{0x05, 1},       // header longer than the record
		{0x02, 10},      // reserved serial type
		{0x02, 6, 1, 2}, // int64 with 2 bytes
		{0x02, 1, 7, 8}, // bytes after the last field
		{0x03, 0x81},    // serial type runs past the header
	} {
		if _, err := decodeRecord(bad, encUTF8); err == nil {
			t.Errorf("record % x decoded", bad)
		}
	}
}

func TestDecodeTextUTF16(t *testing.T) {
	if got := decodeText([]byte{'h', 0, 0x3d, 0xd8, 0x42, 0xde}, encUTF16LE); got != "h🙂" {
		t.Errorf("UTF-16le: %q", got)
	}
	if got := decodeText([]byte{0, 'h', 0xd8, 0x3d, 0xde, 0x42}, encUTF16BE); got != "h🙂" {
		t.Errorf("UTF-16be: %q", got)
	}
}

// TestLocalSize checks the spill rule at its edges for 4096-byte pages
// (X = 4061, M = 489, U-4 = 4092): up to X bytes stay on the page; above,
// K = M+((P-M) mod 4092) when K <= X, else M.
func TestLocalSize(t *testing.T) {
	for _, c := range []struct{ p, want int64 }{
		{0, 0}, {4061, 4061},
		{4062, 489},               // K = 4062 > X
		{489 + 4092, 489},         // K = M
		{489 + 4092 + 100, 589},   // K fits
		{489 + 4092 + 3572, 4061}, // K = X
		{489 + 4092 + 3573, 489},  // K = X+1
		{489 + 3*4092 + 7, 496},
	} {
		if got := localSize(c.p, 4096); got != c.want {
			t.Errorf("localSize(%d) = %d, want %d", c.p, got, c.want)
		}
	}
}
