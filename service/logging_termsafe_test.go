package service

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A command line with an ESC and a CSI (U+009B), logged as an attribute,
// reaches stderr escaped in both formats, and a JSON record stays JSON.
func TestLogEscapesControlCharacters(t *testing.T) {
	cmd := "hermes \x1b[2J\u009b31m\x7f"
	for _, format := range []LogFormat{LogText, LogJSON} {
		var b bytes.Buffer
		NewLogger(&b, LogConfig{Format: format}).Info("holder found", "cmd", cmd)
		out := b.String()
		if strings.ContainsAny(out, "\x1b\u009b\x7f") {
			t.Errorf("%s log has a raw control character: %q", format, out)
		}
		if format != LogJSON {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["cmd"] != cmd {
			t.Errorf("JSON record %q: %v, cmd %q", out, err, rec["cmd"])
		}
	}
}
