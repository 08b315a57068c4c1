package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

func readGen(t *testing.T, path string) Generation {
	t.Helper()
	g, err := ReadGeneration(path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// quietWriter starts a writer that commits a few messages and then keeps
// its connection open without writing: -wal and -shm exist and held, and
// nothing changes unless the test changes it.
func quietWriter(t *testing.T) string {
	t.Helper()
	db := filepath.Join(realTemp(t), "state.db")
	createStore(t, db) // checkpointed, so the main header carries the application_id
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 3, Linger: true})
	deadline := time.Now().Add(20 * time.Second)
	for len(w.Acks(t)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("writer did not finish its 3 messages")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return db
}

func TestGenerationOfLiveStore(t *testing.T) {
	db := quietWriter(t)
	g := readGen(t, db)
	if !g.Main.Regular() || !g.WAL.Regular() || !g.SHM.Regular() {
		t.Fatalf("files: %+v", g)
	}
	if g.WALHeader == nil || !g.WALHeader.Valid() || !g.MainHeaderOK || g.AppID != hermestest.Generation {
		t.Fatalf("headers: wal %+v main ok %v appid %#x", g.WALHeader, g.MainHeaderOK, g.AppID)
	}
	if g.Main.Nlink != 1 || g.Main.UID != os.Geteuid() || g.Main.ID == g.WAL.ID {
		t.Fatalf("main %+v wal %+v", g.Main, g.WAL)
	}
	if c := readGen(t, db).Diff(g); !c.Same() || c.String() != "same" {
		t.Fatalf("quiet store changed: %v", c)
	}
}

func TestGenerationRenameOverMain(t *testing.T) {
	db := quietWriter(t)
	g0 := readGen(t, db)
	restored := filepath.Join(filepath.Dir(db), "restored.db")
	createStore(t, restored)
	if err := os.Rename(restored, db); err != nil {
		t.Fatal(err)
	}
	g1 := readGen(t, db)
	if c := g1.Diff(g0); c != MainReplaced {
		t.Fatalf("after rename-over: %v, want main-replaced", c)
	}
}

func TestGenerationSidecars(t *testing.T) {
	db := quietWriter(t)
	g0 := readGen(t, db)

	if err := os.Remove(db + "-shm"); err != nil {
		t.Fatal(err)
	}
	g1 := readGen(t, db)
	if c := g1.Diff(g0); c != SHMRemoved {
		t.Fatalf("after unlink -shm: %v", c)
	}
	if err := os.Remove(db + "-wal"); err != nil {
		t.Fatal(err)
	}
	g2 := readGen(t, db)
	if c := g2.Diff(g1); c != WALRemoved {
		t.Fatalf("after unlink -wal: %v", c)
	}
	if c := g2.Diff(g0); c != WALRemoved|SHMRemoved || c.String() != "wal-removed|shm-removed" {
		t.Fatalf("both unlinked: %v", c)
	}
	if g2.WALHeader != nil {
		t.Fatalf("no -wal but a header %+v", g2.WALHeader)
	}

	// Put files back: created, then replaced.
	for _, suf := range []string{"-wal", "-shm"} {
		writeFile(t, db+suf, "")
	}
	g3 := readGen(t, db)
	if c := g3.Diff(g2); c != WALCreated|SHMCreated {
		t.Fatalf("after create: %v", c)
	}
	for _, suf := range []string{"-wal", "-shm"} {
		writeFile(t, db+suf+".new", "")
		if err := os.Rename(db+suf+".new", db+suf); err != nil {
			t.Fatal(err)
		}
	}
	if c := readGen(t, db).Diff(g3); c != WALReplaced|SHMReplaced {
		t.Fatalf("after rename-over of sidecars: %v", c)
	}
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if c := readGen(t, db).Diff(g3); !c.Has(MainRemoved) || c.Has(MainReplaced) {
		t.Fatalf("after unlink main: %v", c)
	}
}

// TestGenerationWALReset: a writer whose checkpoints complete restarts its
// WAL from the start with new salts and the next checkpoint sequence; the
// inode stays, so only the header tells.
func TestGenerationWALReset(t *testing.T) {
	db := filepath.Join(realTemp(t), "state.db")
	createStore(t, db)
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 2000, CheckpointEvery: 10})
	g0 := readGen(t, db)
	if g0.WALHeader == nil {
		t.Fatal("no WAL header while the writer runs")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		g := readGen(t, db)
		c := g.Diff(g0)
		if c&^WALReset != 0 {
			t.Fatalf("unexpected change %v", c)
		}
		if c.Has(WALReset) {
			if g.WAL.ID != g0.WAL.ID || g.WALHeader == nil || !g.WALHeader.Valid() ||
				g.WALHeader.CheckpointSeq == g0.WALHeader.CheckpointSeq ||
				(g.WALHeader.Salt1 == g0.WALHeader.Salt1 && g.WALHeader.Salt2 == g0.WALHeader.Salt2) {
				t.Fatalf("reset reported, but headers %+v then %+v", g0.WALHeader, g.WALHeader)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no WAL reset seen in 20s; header still %+v", g.WALHeader)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestDiffHeaders(t *testing.T) {
	wal := fileid.State{Exists: true, ID: fileid.ID{Dev: 1, Ino: 2}, Mode: 0o600}
	h := &WALHeader{Salt1: 1, Salt2: 2, CheckpointSeq: 3}
	old := Generation{Main: fileid.State{Exists: true, ID: fileid.ID{Dev: 1, Ino: 1}}, WAL: wal, WALHeader: h, AppID: 7, MainHeaderOK: true}
	cases := []struct {
		name string
		mod  func(g *Generation)
		want Change
	}{
		{"same", func(g *Generation) {}, 0},
		{"truncated", func(g *Generation) { g.WALHeader = nil }, WALReset},
		{"salt", func(g *Generation) { g.WALHeader = &WALHeader{Salt1: 9, Salt2: 2, CheckpointSeq: 3} }, WALReset},
		{"seq", func(g *Generation) { g.WALHeader = &WALHeader{Salt1: 1, Salt2: 2, CheckpointSeq: 4} }, WALReset},
		{"new inode", func(g *Generation) {
			g.WAL.ID.Ino = 3
			g.WALHeader = &WALHeader{Salt1: 9}
		}, WALReplaced},
		{"appid is not identity", func(g *Generation) { g.AppID = 8 }, 0},
	}
	for _, c := range cases {
		g := old
		c.mod(&g)
		if got := g.Diff(old); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// The first header of a fresh WAL is not a reset.
	fresh := old
	fresh.WALHeader = nil
	if got := old.Diff(fresh); got != 0 {
		t.Errorf("nil -> header: %v", got)
	}
	if s := (MainReplaced | WALReset | 1<<15).String(); s != "main-replaced|wal-reset|0x8000" {
		t.Errorf("String: %s", s)
	}
}

// TestReadHeaderIdentity: a header is only read through an fd on the
// inode lstat saw; anything else is reported as a change to retry. By
// name and through the directory's handle alike.
func TestReadHeaderIdentity(t *testing.T) {
	dir := realTemp(t)
	db := filepath.Join(dir, "state.db")
	createStore(t, db)
	st, err := fileid.Lstat(db)
	if err != nil {
		t.Fatal(err)
	}
	link := db + "-link"
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	h, err := OpenDir(dir, DirID{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, d := range []genFiles{inDir{h}} {
		if b, err := readHeader(d, "state.db", st, mainHeaderSize); err != nil || len(b) != mainHeaderSize {
			t.Fatalf("%T: readHeader: %d bytes, %v", d, len(b), err)
		}
		other := st
		other.ID.Ino++
		if _, err := readHeader(d, "state.db", other, mainHeaderSize); !errors.Is(err, errChanged) {
			t.Fatalf("%T: wrong identity: %v", d, err)
		}
		if _, err := readHeader(d, "state.db-gone", st, mainHeaderSize); !errors.Is(err, errChanged) {
			t.Fatalf("%T: vanished file: %v", d, err)
		}
		if _, err := readHeader(d, "state.db-link", st, mainHeaderSize); !errors.Is(err, errChanged) {
			t.Fatalf("%T: symlink swapped in: %v", d, err)
		}
	}
}

func TestGenerationMissingStore(t *testing.T) {
	g, err := ReadGeneration(filepath.Join(realTemp(t), "state.db"))
	if err != nil || g.Main.Exists || g.WAL.Exists || g.SHM.Exists || g.MainHeaderOK {
		t.Fatalf("%+v, %v", g, err)
	}
}
