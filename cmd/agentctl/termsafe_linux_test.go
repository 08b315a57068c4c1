package main

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// rawControl finds the first byte of out a terminal would interpret: a C0
// control other than newline and tab, DEL, a C1 control or a byte that is
// not UTF-8.
func rawControl(out string) (int, bool) {
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRuneInString(out[i:])
		if (r == utf8.RuneError && size == 1) || (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
			return i, true
		}
		i += size
	}
	return 0, false
}

// A holder whose command line carries an ESC, a CSI (U+009B) and a byte
// that is not UTF-8 is printed by holders, status and doctor with those
// escaped: another user chooses the command line, root reads the output.
func TestTextOutputEscapesHolderCommandLine(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	evil := "s\x1b]0;pwned\x07\u009b2J\xff"
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 20, Session: evil})
	vars := noDaemon(t)
	for _, args := range [][]string{
		{"holders", "--files", "--home", home},
		{"status", "--home", home},
		{"status", "--all", "--home", home},
		{"doctor", "--home", home},
		{"holders", "--json", "--home", home},
		{"status", "--json", "--home", home},
	} {
		r := ctl(t, vars, args...)
		for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if i, bad := rawControl(out); bad {
				t.Errorf("agentctl %s: raw control byte %#x at %d of %s:\n%q", strings.Join(args, " "), out[i], i, name, out)
			}
		}
		if args[0] == "holders" && !strings.Contains(r.stdout, `\u009b2J`) {
			t.Errorf("agentctl %s does not show writer %d's command line escaped:\n%s", strings.Join(args, " "), w.Pid, r.stdout)
		}
	}
}
