package walsalvage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf16"
)

var errBadRecord = errors.New("record does not decode")

// varint decodes SQLite's variable-length integer at b[0:]: up to eight
// bytes of 7 bits, big-endian, each with the high bit set when another
// follows, then a ninth byte of 8 bits. n is 0 when b ends first.
func varint(b []byte) (v uint64, n int) {
	for i := 0; i < 8; i++ {
		if i >= len(b) {
			return 0, 0
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	if len(b) < 9 {
		return 0, 0
	}
	return v<<8 | uint64(b[8]), 9
}

// serialLen is the body size of a serial type; ok is false for the
// reserved types 10 and 11.
func serialLen(t uint64) (int64, bool) {
	switch {
	case t <= 4:
		return int64(t), true
	case t == 5:
		return 6, true
	case t == 6 || t == 7:
		return 8, true
	case t == 8 || t == 9:
		return 0, true
	case t == 10 || t == 11:
		return 0, false
	}
	return int64(t-12) / 2, true
}

// storageClass is the kind a serial type decodes to.
func storageClass(t uint64) Kind {
	switch {
	case t == 0:
		return Null
	case t <= 6 || t == 8 || t == 9:
		return Integer
	case t == 7:
		return Real
	case t >= 12 && t%2 == 0:
		return Blob
	case t >= 13:
		return Text
	}
	return Null
}

// recordHeader decodes the header of the record in b: the serial type of
// each field, and where the body starts. b may be only the first part of
// the payload, as long as it holds the whole header.
func recordHeader(b []byte) (types []uint64, body int, err error) {
	hs, n := varint(b)
	if n == 0 || hs < uint64(n) || hs > uint64(len(b)) {
		return nil, 0, fmt.Errorf("%w: header size %d of a %d-byte payload", errBadRecord, hs, len(b))
	}
	for i := n; i < int(hs); {
		t, m := varint(b[i:int(hs)])
		if m == 0 {
			return nil, 0, fmt.Errorf("%w: serial type %d runs past the header", errBadRecord, len(types))
		}
		if _, ok := serialLen(t); !ok {
			return nil, 0, fmt.Errorf("%w: reserved serial type %d in field %d", errBadRecord, t, len(types))
		}
		types = append(types, t)
		i += m
	}
	return types, int(hs), nil
}

// textEncoding is the database's text encoding (header offset 56).
type textEncoding uint32

const (
	encUTF8    textEncoding = 1
	encUTF16LE textEncoding = 2
	encUTF16BE textEncoding = 3
)

// decodeRecord decodes the whole record in payload.
func decodeRecord(payload []byte, enc textEncoding) ([]Value, error) {
	types, off, err := recordHeader(payload)
	if err != nil {
		return nil, err
	}
	vals := make([]Value, len(types))
	for i, t := range types {
		l, _ := serialLen(t)
		if l > int64(len(payload)-off) {
			return nil, fmt.Errorf("%w: field %d needs %d bytes, %d left", errBadRecord, i, l, len(payload)-off)
		}
		b := payload[off : off+int(l)]
		off += int(l)
		vals[i] = decodeValue(t, b, enc)
	}
	if off != len(payload) {
		return nil, fmt.Errorf("%w: %d bytes after the last field", errBadRecord, len(payload)-off)
	}
	return vals, nil
}

func decodeValue(t uint64, b []byte, enc textEncoding) Value {
	switch {
	case t == 0:
		return Value{}
	case t == 8:
		return IntValue(0)
	case t == 9:
		return IntValue(1)
	case t <= 6:
		// Big-endian two's complement of 1, 2, 3, 4, 6 or 8 bytes.
		var v int64
		if b[0]&0x80 != 0 {
			v = -1
		}
		for _, c := range b {
			v = v<<8 | int64(c)
		}
		return IntValue(v)
	case t == 7:
		return RealValue(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case t%2 == 0:
		return BlobValue(append([]byte{}, b...))
	}
	return TextValue(decodeText(b, enc))
}

// decodeText turns stored text into Go's UTF-8. A UTF-8 database's bytes
// are kept as they are, even when not valid UTF-8, as SQLite returns them.
func decodeText(b []byte, enc textEncoding) string {
	if enc != encUTF16LE && enc != encUTF16BE {
		return string(b)
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		if enc == encUTF16LE {
			u[i] = binary.LittleEndian.Uint16(b[2*i:])
		} else {
			u[i] = binary.BigEndian.Uint16(b[2*i:])
		}
	}
	return string(utf16.Decode(u))
}
