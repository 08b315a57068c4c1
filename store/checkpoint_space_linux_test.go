package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The agent's idle checkpoint waits for space: one that ran out of it half
// way left the main with some pages new and some old, and the -wal
// unlinked next (issue 18's seed 1 run, a full tmpfs profile) left a main
// nothing could read until space returned and nothing then mended.
func TestCheckpointIdleWaitsForSpace(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v; this needs root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 60, CheckpointEvery: -1, Linger: true})
	w.WaitAcks(t, 60)
	g, err := ReadGeneration(db)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the filesystem, then give back less than the WAL's size.
	fill := filepath.Join(dir, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	if b := backlogOf(t, db, true); !b.Pending() {
		t.Fatalf("no backlog to checkpoint: %+v", b)
	}
	ctx := context.Background()
	if _, err := resolved(t, db).CheckpointIdle(ctx, g.IDs()); !errors.Is(err, ErrNoSpaceToCheckpoint) {
		t.Fatalf("CheckpointIdle on a full filesystem = %v, want ErrNoSpaceToCheckpoint", err)
	}
	after, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the main changed although the checkpoint did not run")
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	cp, err := resolved(t, db).CheckpointIdle(ctx, g.IDs())
	if err != nil || !cp.Done {
		t.Fatalf("CheckpointIdle with space = %+v, %v", cp, err)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
