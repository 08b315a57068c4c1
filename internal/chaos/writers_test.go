package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestSpawnFailureSaysWhy runs the slot's loop with the real writer on a
// store whose pages were overwritten: every writer it starts fails its
// first commit and exits, as seed 1's 4,784 "spawn failed" writers did on
// a malformed default store. The report must say that, not only "spawn
// failed", so a run's writer exits name the corrupt store as the cause
// (and a writer stuck at spawn, frozen, would read differently).
func TestSpawnFailureSaysWhy(t *testing.T) {
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	e := &env{root: root, acks: filepath.Join(root, "acks"), logs: filepath.Join(root, "logs"), writer: bin}
	home := filepath.Join(root, "home")
	for _, d := range []string{e.acks, e.logs, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := &profile{name: "default", dir: home, db: filepath.Join(home, "state.db")}
	if err := hermestest.CreateStore(p.db); err != nil {
		t.Fatal(err)
	}
	damagePages(t, p.db)
	s, err := newWriterSlot(e, p, 1, 50, slog.New(slog.DiscardHandler), func() time.Duration { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { s.loop(stop); close(done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.mu.Lock()
		failed := s.spawns > 1 && s.cur == nil
		exits := mapString(s.exits)
		s.mu.Unlock()
		if failed {
			close(stop)
			<-done
			t.Logf("writer exits: %s", exits)
			if !strings.Contains(exits, "spawn failed (") || !strings.Contains(exits, "malformed") {
				t.Fatalf("writer exits %q, want spawn failures that name the malformed store", exits)
			}
			return
		}
		if time.Now().After(deadline) {
			close(stop)
			<-done
			t.Fatalf("no writer failed to start on the damaged store in 60 s (exits %q)", exits)
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
}

// damagePages overwrites every page after the schema's with garbage: the
// file still opens as SQLite, and the first insert finds its b-trees
// malformed.
func damagePages(t *testing.T, db string) {
	t.Helper()
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const page = 4096
	junk := []byte(strings.Repeat("\xa5", page))
	for off := int64(2 * page); off < st.Size(); off += page {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
}
