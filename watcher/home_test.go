package watcher

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHomeProfilesAndTombstones(t *testing.T) {
	root := t.TempDir()
	profiles := mkdir(t, root, "profiles")
	w := start(t, Config{})
	set(t, w, nil, []Home{{Root: root}})

	mkdir(t, profiles, "work")
	if ev := next(t, w); !homeEvent(root, Create, "work")(ev) {
		t.Fatalf("got %+v, want HomeChanged for a new profile", ev)
	}

	// profiles/.deleted does not exist yet: its appearance is an event and
	// arms its watch before the event is delivered.
	mkdir(t, profiles, ".deleted")
	if ev := next(t, w); !homeEvent(root, Create|Dir, ".deleted")(ev) {
		t.Fatalf("got %+v, want HomeChanged for the tombstone directory", ev)
	}
	tomb := filepath.Join(profiles, ".deleted")
	if !watching(w, tomb) {
		t.Fatalf("%s not watched after its event", tomb)
	}
	touch(t, filepath.Join(tomb, "work"))
	waitFor(t, w, "HomeChanged for the tombstone", homeEvent(root, Create, "work"))

	if err := os.Remove(filepath.Join(tomb, "work")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "HomeChanged for the tombstone's removal", homeEvent(root, Remove, "work"))

	touch(t, filepath.Join(root, "state.db"))
	waitFor(t, w, "HomeChanged for the default store", homeEvent(root, Create, "state.db"))

	if err := os.Remove(filepath.Join(profiles, "work")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "HomeChanged for a deleted profile", homeEvent(root, Remove, "work"))
}

func TestHomeWithoutProfilesDir(t *testing.T) {
	root := t.TempDir()
	w := start(t, Config{})
	set(t, w, nil, []Home{{Root: root}})

	// mkdir -p: profiles/ and the profile may both exist before the
	// watcher arms profiles/; re-arming below it must catch up.
	mkdir(t, root, "profiles", ".deleted")
	waitAll(t, w, map[string]func(Event) bool{
		"HomeChanged for profiles/": homeEvent(root, Create|Dir, "profiles"),
		"HomeChanged for .deleted/": homeEvent(root, Create|Dir, ".deleted"),
	})
	tomb := filepath.Join(root, "profiles", ".deleted")
	if !watching(w, tomb) {
		t.Fatalf("%s not watched after its event", tomb)
	}
	touch(t, filepath.Join(tomb, "gone"))
	waitFor(t, w, "HomeChanged for the tombstone", homeEvent(root, Create, "gone"))
}

func TestProfileDirGoneAndBack(t *testing.T) {
	root := t.TempDir()
	p1 := mkdir(t, root, "profiles", "p1")
	db := filepath.Join(p1, "state.db")
	touch(t, db)
	w := start(t, Config{})
	s := newSentinel(t)
	set(t, w, []Target{{Key: db, Dir: p1, Names: storeNames}, s.Target}, []Home{{Root: root}})

	if err := os.RemoveAll(p1); err != nil {
		t.Fatal(err)
	}
	waitAll(t, w, map[string]func(Event) bool{
		"StoreChanged for the lost directory": storeEvent(db, Dir|Remove, "p1"),
		"HomeChanged for the lost profile":    homeEvent(root, Remove, "p1"),
	})
	if watching(w, p1) {
		t.Fatalf("%s still watched after removal", p1)
	}

	mkdir(t, p1)
	waitFor(t, w, "StoreChanged for the returning directory", storeEvent(db, Dir|Create, "p1"))
	if !watching(w, p1) {
		t.Fatalf("%s not re-armed", p1)
	}
	touch(t, db)
	waitFor(t, w, "StoreChanged for the new state.db", storeEvent(db, Create, "state.db"))

	// A profile renamed away takes its inode, and the watch, with it.
	if err := os.Rename(p1, filepath.Join(root, "profiles", "p1-old")); err != nil {
		t.Fatal(err)
	}
	waitAll(t, w, map[string]func(Event) bool{
		"StoreChanged for the renamed directory": storeEvent(db, Dir|Rename, "p1"),
		"HomeChanged for the renamed profile":    homeEvent(root, Create, "p1-old"),
	})
	if watching(w, p1) {
		t.Fatalf("%s still watched after it was renamed away", p1)
	}
	// The moved directory's changes are nobody's store any more.
	renameOver(t, filepath.Join(root, "profiles", "p1-old", "state.db"))
	s.expectNext(t, w)
}
