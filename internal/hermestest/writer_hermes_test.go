//go:build linux

package hermestest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With -hermes-guards the writer behaves like Hermes' SessionDB when its
// -wal and -shm are unlinked under it: the next write is refused and
// diverted to sessions/<session>.jsonl, the lost generation is captured
// once (at that halt) into <db>.retired-wal-<UTC>-<pid>/ with Hermes'
// manifest, and a second opener refuses to start while the first holds
// the deleted WAL.
func TestWriterHermesGuardsSidecarLost(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := StartWriter(t, WriterOptions{DB: db, Create: true, Rate: 300, CheckpointEvery: -1, HermesGuards: true})
	w.WaitAcks(t, 20)
	var st syscall.Stat_t
	if err := syscall.Stat(db+"-wal", &st); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	Eventually(t, "a diverted ack", 10*time.Second, func() bool { return countDiverted(w.Acks(t)) >= 5 })

	// A second Hermes opener refuses: the first holds the deleted WAL.
	bin, err := WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-db", db, "-session", "s2", "-count", "1", "-hermes-guards").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "deleted state.db-wal") {
		t.Fatalf("second opener: %v, %s; want exit 3 naming the deleted WAL", err, out)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	caps := hermesCaptures(t, db)
	if len(caps) != 1 || strings.HasSuffix(caps[0], ".partial") {
		t.Fatalf("captures: %v, want one finished", caps)
	}
	m := readCaptureManifest(t, caps[0])
	if m.Trigger != "halt" || m.PID != w.Pid || m.Version != 1 {
		t.Fatalf("manifest: %+v", m)
	}
	if m.WAL.Identity[0] != st.Dev || m.WAL.Identity[1] != st.Ino {
		t.Fatalf("captured WAL identity %v, want the unlinked one %d:%d", m.WAL.Identity, st.Dev, st.Ino)
	}
	wal, err := os.ReadFile(filepath.Join(caps[0], "state.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(wal); hex.EncodeToString(sum[:]) != m.WAL.SHA256 || int64(len(wal)) != m.WAL.Bytes {
		t.Fatal("captured WAL does not match its manifest")
	}
	if m.Main.Mode != "copied" || m.Main.File != "state.db" {
		t.Fatalf("main: %+v", m.Main)
	}

	// Every committed ack is in the capture, every refused one diverted.
	rows := captureContents(t, caps[0])
	lines := divertedLines(t, filepath.Join(dir, "sessions", "s1.jsonl"))
	for _, a := range w.Acks(t) {
		c := MessageContent(a.Session, a.Seq)
		if a.ID == -1 {
			if lines[c] != 1 {
				t.Fatalf("diverted ack %d: %d lines", a.Seq, lines[c])
			}
		} else if rows[c] != 1 {
			t.Fatalf("committed ack %d: %d rows in the capture", a.Seq, rows[c])
		}
	}
}

// A rename-over restore that removes the sidecars: every write after it
// is refused and diverted, and close() (SIGTERM) captures the retired WAL
// generation, with the main now at the path, as Hermes does.
func TestWriterHermesGuardsReplaced(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := StartWriter(t, WriterOptions{DB: db, Create: true, Rate: 300, CheckpointEvery: -1, HermesGuards: true})
	w.WaitAcks(t, 20)
	RestoreOver(t, db)
	Eventually(t, "diverted acks", 10*time.Second, func() bool { return countDiverted(w.Acks(t)) >= 5 })
	if caps := hermesCaptures(t, db); len(caps) != 0 {
		t.Fatalf("a replaced main is captured at close, not at halt: %v", caps)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	caps := hermesCaptures(t, db)
	if len(caps) != 1 || strings.HasSuffix(caps[0], ".partial") {
		t.Fatalf("captures: %v, want one finished", caps)
	}
	if m := readCaptureManifest(t, caps[0]); m.Trigger != "close" {
		t.Fatalf("trigger %q, want close", m.Trigger)
	}
	lines := divertedLines(t, filepath.Join(dir, "sessions", "s1.jsonl"))
	for _, a := range w.Acks(t) {
		if a.ID == -1 && lines[MessageContent(a.Session, a.Seq)] != 1 {
			t.Fatalf("diverted ack %d not in the JSONL", a.Seq)
		}
	}
}

func countDiverted(acks []Ack) int {
	n := 0
	for _, a := range acks {
		if a.ID == -1 {
			n++
		}
	}
	return n
}

func hermesCaptures(t *testing.T, db string) []string {
	t.Helper()
	m, err := filepath.Glob(db + ".retired-wal-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type captureManifest struct {
	Version int    `json:"version"`
	Trigger string `json:"trigger"`
	PID     int    `json:"pid"`
	WAL     struct {
		Identity [2]uint64 `json:"identity"`
		Bytes    int64     `json:"bytes"`
		SHA256   string    `json:"sha256"`
	} `json:"wal"`
	Main struct {
		Mode string `json:"mode"`
		File string `json:"file"`
	} `json:"main"`
}

func readCaptureManifest(t *testing.T, dir string) captureManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m captureManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// captureContents opens a copy of the capture's main + WAL and counts the
// messages by content.
func captureContents(t *testing.T, capDir string) map[string]int {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "state.db")
	for _, s := range []string{"", "-wal"} {
		b, err := os.ReadFile(filepath.Join(capDir, "state.db"+s))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+s, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rows := map[string]int{}
	for _, r := range QueryRows(t, OpenDB(t, "file:"+dst), `SELECT content FROM messages`) {
		if c, ok := r["content"].(string); ok {
			rows[c]++
		}
	}
	return rows
}

// divertedLines counts a diverted JSONL's lines by content, checking each
// is in Hermes' key order.
func divertedLines(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `{"role": "`) || !strings.Contains(line, `"_compressed_summary": false, "timestamp": `) {
			t.Fatalf("not Hermes' diverted form: %s", line)
		}
		var r struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out[r.Content]++
	}
	return out
}
