package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/supervisor"
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

// The same kind of holder, held by agentd in an incident: incidents,
// incident show and status print its executable's path (and command
// line) escaped too.
func TestIncidentOutputEscapesHolderCommandLine(t *testing.T) {
	db := hermestest.NewStore(t)
	home := filepath.Dir(db)
	a, _, _ := startAgent(t, home, func(o *supervisor.Options) { o.Policies.Replaced = incident.PolicyHold })
	vars := map[string]string{socketEnv: a.SocketPath()}
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	evilDir := filepath.Join(t.TempDir(), "w\x1b[2J\u009b31m")
	if err := os.Mkdir(evilDir, 0o755); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(evilDir, "writer")
	hermestest.CopyFile(t, bin, evil, 0o755)
	w, err := hermestest.SpawnWriter(evil, hermestest.WriterOptions{DB: db, Rate: 100, Session: "s\x1b[2J\u009b31m\xff",
		Ack: filepath.Join(t.TempDir(), "ack")}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Kill(); <-w.Done() })
	w.WaitAcks(t, 5)
	hermestest.Eventually(t, "agentd to report the writer as a holder", 20*time.Second, func() bool {
		p := holderOf(storeOf(t, decodeStatus(t, ctl(t, vars, "status", "--json")), db), w.Pid)
		return p != nil && len(heldRoles(p)) == 3
	})
	renameFreshOver(t, db)
	var inc journal.Incident
	hermestest.Eventually(t, "a pinned incident", 15*time.Second, func() bool {
		incs := incidentsJSON(t, vars)
		if len(incs) == 1 && incs[0].State == journal.StatePinned {
			inc = incs[0]
			return true
		}
		return false
	})
	for _, args := range [][]string{
		{"incidents"}, {"incidents", "--all"}, {"incident", "show", inc.ID}, {"incident", "show", "--json", inc.ID},
		{"status"}, {"holders", "--files"},
	} {
		r := ctl(t, vars, args...)
		for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if i, bad := rawControl(out); bad {
				t.Errorf("agentctl %s: raw control byte %#x at %d of %s:\n%q", strings.Join(args, " "), out[i], i, name, out)
			}
		}
	}
	if r := ctl(t, vars, "incident", "show", inc.ID); !strings.Contains(r.stdout, `\u009b31m`) {
		t.Errorf("incident show does not show the writer's executable escaped:\n%s", r.stdout)
	}
}
