package termsafe

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestStringEscapesC0C1AndInvalidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain é":         "plain é",
		"a\x1b[2Jb":       `a\x1b[2Jb`,
		"csi\u009b31m":    `csi\u009b31m`,
		"bad\x9bbyte":     `bad\x9bbyte`,
		"line\nnext\ttab": `line\x0anext\x09tab`,
		"del\x7f":         `del\u007f`,
		"\xff\xfe":        `\xff\xfe`,
		"ok \uFFFD kept":  "ok \uFFFD kept",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriterKeepsLayoutAndJoinsSplitRunes(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	csi := []byte("\u009b")
	w.Write([]byte("x\t1\n" + "é"[:1]))
	w.Write([]byte("é"[1:] + string(csi[:1])))
	w.Write(csi[1:])
	w.Write([]byte("\x1b"))
	w.Write([]byte{0xe2})
	w.Flush()
	if want := "x\t1\né\\u009b\\x1b\\xe2"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestEncodeJSONStaysJSON(t *testing.T) {
	in := map[string]string{"cmd": "evil\u009b31m\x1b]0;x\x07\x7f"}
	var b bytes.Buffer
	if err := EncodeJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	for _, c := range b.Bytes() {
		if c < 0x20 && c != '\n' || c >= 0x7f {
			t.Fatalf("raw control byte %#x in %q", c, b.String())
		}
	}
	var out map[string]string
	if err := json.Unmarshal(b.Bytes(), &out); err != nil || out["cmd"] != in["cmd"] {
		t.Fatalf("round trip: %v %q", err, out["cmd"])
	}
}
