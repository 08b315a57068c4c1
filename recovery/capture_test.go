//go:build linux

package recovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestCaptureReplacedGeneration is the replaced incident end to end on the
// capture side: a writer keeps committing into a generation a restore
// renamed over; its main and wal are pinned through /proc, it is frozen and
// killed (no checkpoint), and the capture must hold every row it
// acknowledged, in a layout Hermes reads.
func TestCaptureReplacedGeneration(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, ToolEvery: 7})
	before := len(w.WaitAcks(t, 150))
	ids := map[string]fileid.ID{"main": statID(t, db), "-wal": statID(t, db+"-wal"), "-shm": statID(t, db+"-shm")}

	// The restore: a fresh store renamed over the path, sidecars removed.
	fresh := filepath.Join(dir, "fresh.db")
	if err := hermestest.CreateStore(fresh); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, db); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil {
			t.Fatal(err)
		}
	}
	// Rows the orphan acknowledges after the replacement are what is at risk.
	w.WaitAcks(t, before+60)
	pinned := pinFromProc(t, w.Pid, db, ids)
	stopWriter(t, w)()
	acks := w.Acks(t)

	now := time.Date(2026, 10, 1, 7, 24, 48, 0, time.UTC)
	req := CaptureRequest{DBPath: db, PID: w.Pid, Kind: KindReplaced, IncidentID: "inc-7", Now: now}
	src := CaptureSource{Main: pinned["main"], WAL: pinned["-wal"], SHM: pinned["-shm"]}

	c, err := WriteCapture(context.Background(), src, req)
	if err != nil {
		t.Fatal(err)
	}
	wantName := "state.db.retired-wal-20261001-072448-" + strconv.Itoa(w.Pid)
	if filepath.Base(c.Dir) != wantName || filepath.Dir(c.Dir) != dir {
		t.Fatalf("capture dir %s, want %s in %s", c.Dir, wantName, dir)
	}
	if c.MainHeaderOnly || c.Manifest.WAL == nil || c.Manifest.WAL.Identity.ID() != ids["-wal"] || c.Manifest.Main.Identity.ID() != ids["main"] {
		t.Fatalf("manifest: %+v", c.Manifest)
	}
	checkModes(t, c.Dir)
	checkHashes(t, c.Dir, c.Manifest)
	checkHermesShape(t, c.Dir)

	info, err := OpenCapture(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Producer != "stateguard" || info.WAL == "" || info.Main == "" {
		t.Fatalf("OpenCapture: %+v", info)
	}
	copyPath, err := PrivateCopy(context.Background(), c.Dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, hermestest.OpenDB(t, "file:"+copyPath), acks)

	// The capture was never opened with SQLite: no -shm or journal appeared.
	if ents, _ := os.ReadDir(c.Dir); len(ents) != 4 {
		t.Fatalf("capture holds %d entries, want main, wal, shm, manifest", len(ents))
	}
	// The healthy store is the fresh one, untouched.
	var n int
	if err := hermestest.OpenDB(t, "file:"+db+"?mode=ro").QueryRow(`SELECT count(*) FROM messages`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("healthy store: %d messages, %v", n, err)
	}

	// A second capture of the same pid in the same second gets -1.
	c2, err := WriteCapture(context.Background(), src, req)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(c2.Dir) != wantName+"-1" {
		t.Fatalf("second capture %s, want %s-1", c2.Dir, wantName)
	}
	if c2.Manifest.WAL.SHA256 != c.Manifest.WAL.SHA256 {
		t.Fatal("two captures of the same pinned WAL differ")
	}
}

// checkModes: directory 0700, files 0600, nothing left of the staging.
func checkModes(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("%s: mode %v", dir, fi.Mode())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("staging file %s left in the capture", e.Name())
		}
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o600 {
			t.Fatalf("%s: mode %v, want 0600", e.Name(), fi.Mode())
		}
	}
	if _, err := os.Lstat(dir + partialSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging dir left behind: %v", err)
	}
}

// checkHashes recomputes every file's sha256 and size independently.
func checkHashes(t *testing.T, dir string, m *Manifest) {
	t.Helper()
	for _, e := range m.files() {
		b, err := os.ReadFile(filepath.Join(dir, e.name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if int64(len(b)) != e.bytes || hex.EncodeToString(sum[:]) != e.sha256 {
			t.Fatalf("%s: %d bytes sha256 %x, manifest %d %s", e.name, len(b), sum, e.bytes, e.sha256)
		}
	}
}

var capturedAtRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// checkHermesShape reads manifest.json as Hermes' Python does (plain JSON
// values) and checks the keys and types its readers rely on.
func checkHermesShape(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "database", "trigger", "pid", "captured_at", "wal", "main", "shm", "path_generation_at_capture"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("manifest lacks %q: %s", k, b)
		}
	}
	if m["version"] != float64(1) || !capturedAtRE.MatchString(m["captured_at"].(string)) {
		t.Fatalf("version %v captured_at %v", m["version"], m["captured_at"])
	}
	if _, ok := m["pid"].(float64); !ok {
		t.Fatalf("pid %T", m["pid"])
	}
	pair := func(v any) bool {
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return false
		}
		_, ok1 := a[0].(float64)
		_, ok2 := a[1].(float64)
		return ok1 && ok2
	}
	wal := m["wal"].(map[string]any)
	main := m["main"].(map[string]any)
	if !pair(wal["identity"]) || wal["file"] != "state.db-wal" || len(wal["sha256"].(string)) != 64 {
		t.Fatalf("wal: %v", wal)
	}
	if _, ok := wal["bytes"].(float64); !ok {
		t.Fatalf("wal.bytes: %v", wal["bytes"])
	}
	if !pair(main["identity"]) || main["file"] != "state.db" || main["mode"] != "copied" {
		t.Fatalf("main: %v", main)
	}
	for _, k := range []string{"size", "bytes"} {
		if _, ok := main[k].(float64); !ok {
			t.Fatalf("main.%s: %v", k, main[k])
		}
	}
	if h := main["header"].(map[string]any); h["valid"] != true || h["application_id"] != float64(hermestest.Generation) {
		t.Fatalf("main.header: %v", h)
	}
}
