//go:build linux

package recovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// hermesCaptured is an orphan captured twice: by the Hermes-like writer
// itself (its halt after -wal and -shm were unlinked) and by stateguard
// from pins taken before the unlink.
type hermesCaptured struct {
	db, own, hermes string
	pid             int
}

func captureTwice(t *testing.T) hermesCaptured {
	t.Helper()
	db := hermestest.NewStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, CheckpointEvery: -1, HermesGuards: true})
	w.WaitAcks(t, 20)
	want := map[string]fileid.ID{"main": statID(t, db), "wal": statID(t, db+"-wal"), "shm": statID(t, db+"-shm")}
	pins := pinFromProc(t, w.Pid, db, want)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	var hermes string
	hermestest.Eventually(t, "the writer's own capture", 10*time.Second, func() bool {
		for _, d := range retiredDirs(t, filepath.Dir(db)) {
			if !strings.HasSuffix(d, partialSuffix) {
				hermes = d
				return true
			}
		}
		return false
	})
	stopWriter(t, w)()
	c, err := WriteCapture(context.Background(), CaptureSource{Main: pins["main"], WAL: pins["wal"], SHM: pins["shm"]},
		CaptureRequest{DBPath: db, PID: w.Pid, IncidentID: "inc1", Kind: KindSidecarLost})
	if err != nil {
		t.Fatal(err)
	}
	return hermesCaptured{db: db, own: c.Dir, hermes: filepath.Join(filepath.Dir(db), filepath.Base(hermes)), pid: w.Pid}
}

func settle(t *testing.T, hc hermesCaptured, alive bool) []ForeignCapture {
	t.Helper()
	out, err := SettleForeignCaptures(context.Background(), ForeignRequest{DBPath: hc.db, Capture: hc.own,
		Holders: []int{hc.pid}, Alive: func(int) bool { return alive }})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func pathExists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	return err == nil
}

// A finished Hermes capture of the same WAL inode with the same bytes is
// a second copy of the orphan: removed, the incident's kept.
func TestSettleRemovesHermesDuplicate(t *testing.T) {
	hc := captureTwice(t)
	out := settle(t, hc, false)
	if len(out) != 1 || out[0].Outcome != ForeignDuplicateRemoved || out[0].Path != hc.hermes || out[0].PID != hc.pid {
		t.Fatalf("settled: %+v", out)
	}
	if pathExists(t, hc.hermes) || !pathExists(t, hc.own) {
		t.Fatal("the duplicate is still there, or the incident's capture is gone")
	}
}

// A Hermes capture whose WAL holds bytes the incident's lacks is never
// removed, even with a manifest that matches its files.
func TestSettleKeepsHermesCaptureWithMoreBytes(t *testing.T) {
	hc := captureTwice(t)
	wal := filepath.Join(hc.hermes, "state.db-wal")
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, "frames the incident never saw"...)
	if err := os.WriteFile(wal, b, 0o600); err != nil {
		t.Fatal(err)
	}
	mpath := filepath.Join(hc.hermes, ManifestName)
	var m map[string]any
	mb, _ := os.ReadFile(mpath)
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m["wal"].(map[string]any)["bytes"], m["wal"].(map[string]any)["sha256"] = len(b), hex.EncodeToString(sum[:])
	mb, _ = json.Marshal(m)
	if err := os.WriteFile(mpath, mb, 0o600); err != nil {
		t.Fatal(err)
	}
	out := settle(t, hc, false)
	if len(out) != 1 || out[0].Outcome != ForeignKept {
		t.Fatalf("settled: %+v", out)
	}
	if !pathExists(t, hc.hermes) {
		t.Fatal("a capture holding more than the incident's was removed")
	}
}

// The staging directory of a Hermes capture cut short: removed once its
// process is gone and its WAL bytes are a prefix of the incident's; left
// alone while the process lives; kept when it holds other bytes.
func TestSettleHermesPartial(t *testing.T) {
	hc := captureTwice(t)
	if _, err := RemoveCapture(store.Store{Path: hc.db, Kind: store.Hermes}, hc.hermes); err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(hc.own, "state.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	partial := hc.hermes + partialSuffix
	if err := os.Mkdir(partial, 0o700); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(partial, "state.db-wal.part")
	if err := os.WriteFile(part, own[:len(own)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if out := settle(t, hc, true); len(out) != 0 || !pathExists(t, partial) {
		t.Fatalf("a staging directory of a live process was settled: %+v", out)
	}
	foreign := append([]byte{}, own[:len(own)/2]...)
	foreign[len(foreign)-1] ^= 0xff
	if err := os.WriteFile(part, foreign, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := settle(t, hc, false); len(out) != 1 || out[0].Outcome != ForeignKept || !pathExists(t, partial) {
		t.Fatalf("a staging directory holding other bytes: %+v", out)
	}
	if err := os.WriteFile(part, own[:len(own)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if out := settle(t, hc, false); len(out) != 1 || out[0].Outcome != ForeignPartialRemoved || pathExists(t, partial) {
		t.Fatalf("settled: %+v", out)
	}
}
