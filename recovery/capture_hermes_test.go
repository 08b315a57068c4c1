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
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// The Hermes-written captures of testdata/capture/: the layout of
// capture_retired_wal_generation (docs/hermes.md), built from a real
// store whose five newest rows exist only in its WAL. Rebuild them with
// STATEGUARD_UPDATE_CAPTURE_FIXTURES=1 go test -run TestUpdateHermesCaptureFixtures.
const (
	hermesFixtureEnv        = "STATEGUARD_UPDATE_CAPTURE_FIXTURES"
	hermesFixture           = "testdata/capture/hermes-v1/state.db.retired-wal-20261001-072448-3624811"
	hermesHeaderOnlyFixture = "testdata/capture/hermes-v1-header-only/state.db.retired-wal-20261002-101500-4100"
	hermesFixtureRows       = 5
)

func TestOpenHermesCapture(t *testing.T) {
	info, err := OpenCapture(hermesFixture)
	if err != nil {
		t.Fatal(err)
	}
	m := info.Manifest
	if info.Producer != "hermes" || info.MainHeaderOnly || info.WAL == "" || info.SHM == "" || info.Main == "" {
		t.Fatalf("info: %+v", info)
	}
	if m.PID != 3624811 || m.WAL.Identity == nil || m.WAL.Identity.ID() != (fileid.ID{Dev: 2049, Ino: 1835532}) || m.Python == "" {
		t.Fatalf("manifest: %+v wal %+v", m, m.WAL)
	}
	if at, err := m.CapturedTime(); err != nil || at.Hour() != 7 {
		t.Fatalf("captured_at %q: %v", m.CapturedAt, err)
	}

	// The rows are only in the WAL: the main alone has none of them.
	alone := filepath.Join(t.TempDir(), "state.db")
	b, err := os.ReadFile(info.Main)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if n := countMessages(t, alone); n != 0 {
		t.Fatalf("fixture main alone holds %d messages; the fixture must keep its rows in the WAL", n)
	}

	p, err := PrivateCopy(context.Background(), hermesFixture, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := hermestest.OpenDB(t, "file:"+p)
	var acks []hermestest.Ack
	rows, err := db.Query(`SELECT timestamp FROM messages WHERE session_id='s1' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		a := hermestest.Ack{Session: "s1", Seq: int64(len(acks) + 1)}
		if err := rows.Scan(&a.Timestamp); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acks) != hermesFixtureRows {
		t.Fatalf("private copy holds %d messages, want %d", len(acks), hermesFixtureRows)
	}
	checkRows(t, db, acks)
}

func TestOpenHermesHeaderOnlyCapture(t *testing.T) {
	info, err := OpenCapture(hermesHeaderOnlyFixture)
	if err != nil {
		t.Fatal(err)
	}
	if !info.MainHeaderOnly || filepath.Base(info.Main) != "state.db.header" || info.SHM != "" || info.Manifest.Main.Size != 600<<20 {
		t.Fatalf("info: %+v main %+v", info, info.Manifest.Main)
	}
	if h := info.Manifest.Main.Header; h == nil || !h.Valid || h.ApplicationID != hermestest.Generation {
		t.Fatalf("header: %+v", h)
	}
	_, err = PrivateCopy(context.Background(), hermesHeaderOnlyFixture, t.TempDir())
	if !errors.Is(err, ErrMainHeaderOnly) {
		t.Fatalf("PrivateCopy of a header-only capture: %v", err)
	}
}

func countMessages(t *testing.T, path string) int {
	t.Helper()
	var n int
	if err := hermestest.OpenDB(t, "file:"+path).QueryRow(`SELECT count(*) FROM messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUpdateHermesCaptureFixtures rebuilds the fixtures the way Hermes
// lays out a capture: state.db, state.db-wal, state.db-shm and a manifest
// serialised like json.dump(sort_keys=True, indent=2) (Go's sorted map
// keys and indent produce the same text for this ASCII content).
func TestUpdateHermesCaptureFixtures(t *testing.T) {
	if os.Getenv(hermesFixtureEnv) == "" {
		t.Skipf("set %s=1 to rebuild the Hermes capture fixtures", hermesFixtureEnv)
	}
	gen, _ := crashedGeneration(t, hermesFixtureRows, true)
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	main, wal, shm := read(gen), read(gen+"-wal"), read(gen+"-shm")
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	hdr := ParseMainHeader(main)
	header := map[string]any{"valid": true, "page_size": hdr.PageSize, "change_counter": hdr.ChangeCounter,
		"page_count": hdr.PageCount, "user_version": hdr.UserVersion, "application_id": hdr.ApplicationID,
		"version_valid_for": hdr.VersionValidFor}
	walEntry := map[string]any{"identity": []int{2049, 1835532}, "file": "state.db-wal", "bytes": len(wal), "sha256": sum(wal)}
	note := "Frames in this WAL were committed by the retired generation; whether they belong on the main now at the path is for the operator to decide."

	write := func(dir string, files map[string][]byte, manifest map[string]any) {
		if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		b, err := json.MarshalIndent(manifest, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(hermesFixture, map[string][]byte{"state.db": main, "state.db-wal": wal, "state.db-shm": shm}, map[string]any{
		"version": 1, "database": "/home/user/.hermes/state.db", "trigger": "deleted_wal_guard", "pid": 3624811,
		"captured_at": "2026-10-01T07:24:48Z", "python": "3.11.15", "sqlite": "3.50.4",
		"wal":                        walEntry,
		"shm":                        map[string]any{"identity": []int{2049, 1835533}, "file": "state.db-shm", "bytes": len(shm), "sha256": sum(shm)},
		"path_generation_at_capture": map[string]any{"-wal": []int{2049, 1835540}, "-shm": []int{2049, 1835541}},
		"note":                       note,
		"main": map[string]any{"identity": []int{2049, 1835009}, "size": len(main), "header": header,
			"mode": "copied", "file": "state.db", "bytes": len(main), "sha256": sum(main)},
	})
	write(hermesHeaderOnlyFixture, map[string][]byte{"state.db-wal": wal, "state.db.header": main[:100]}, map[string]any{
		"version": 1, "database": "/home/user/.hermes/profiles/work/state.db", "trigger": "deleted_wal_guard", "pid": 4100,
		"captured_at": "2026-10-02T10:15:00Z", "python": "3.11.15", "sqlite": "3.50.4",
		"wal": walEntry, "shm": nil, "path_generation_at_capture": map[string]any{}, "note": note,
		"main": map[string]any{"identity": []int{2049, 1835009}, "size": 600 << 20, "header": header,
			"mode": "header_only", "file": "state.db.header", "bytes": 100},
	})
}
