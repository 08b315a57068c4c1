package watcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func TestRenameOverMainIsOneEvent(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	touch(t, db)
	w := start(t, Config{Debounce: 20 * time.Millisecond})
	s := newSentinel(t)
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}, s.Target}, nil)

	renameOver(t, db)
	ev := next(t, w)
	if ev.Kind != StoreChanged || ev.Key != db || !slices.Equal(ev.Names, []string{"state.db"}) || !ev.Ops.Has(Create) || ev.Count != 1 {
		t.Fatalf("got %+v, want one StoreChanged create of state.db for %s", ev, db)
	}
	// No trailing event: the temporary file's name is filtered out.
	quiet(t, w, 10*20*time.Millisecond)
	s.expectNext(t, w)
}

func TestUnlinkSidecarsUnderWriter(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 200})
	w := start(t, Config{})
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}}, nil)

	for _, n := range []string{"state.db-wal", "state.db-shm"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	waitFor(t, w, "removal of -wal and -shm", func(ev Event) bool {
		if ev.Kind == StoreChanged && ev.Key == db && ev.Ops.Has(Remove) {
			for _, n := range ev.Names {
				seen[n] = true
			}
		}
		return seen["state.db-wal"] && seen["state.db-shm"]
	})
}

func TestWALWritesAreSilent(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true})
	w := start(t, Config{})
	s := newSentinel(t)
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}, s.Target}, nil)

	base := int64(len(wr.Acks(t)))
	// The writer commits as fast as it can, checkpointing every 50: wait
	// until the watcher has read and dropped many -wal writes and hundreds
	// of commits (several checkpoints) have landed.
	waitCounter(t, "raw write events", w.stats.writes.Load, 200)
	waitCounter(t, "acknowledged commits", func() int64 { return int64(len(wr.Acks(t))) }, base+500)
	if ok, err := wr.Exited(); ok {
		t.Fatalf("writer exited: %v", err)
	}
	s.expectNext(t, w)
}

func TestUnrelatedNamesIgnored(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	touch(t, db)
	w := start(t, Config{})
	s := newSentinel(t)
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}, s.Target}, nil)

	for _, n := range []string{"notes.txt", "state.db-journal", "state.db.bak", "state.db-wal.tmp"} {
		p := filepath.Join(dir, n)
		touch(t, p)
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p, p+"2"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p + "2"); err != nil {
			t.Fatal(err)
		}
	}
	mkdir(t, dir, "state.db.retired-wal-20260101-000000-1.partial")
	s.expectNext(t, w)

	if err := os.Chmod(db, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); !storeEvent(db, Chmod, "state.db")(ev) {
		t.Fatalf("got %+v, want StoreChanged chmod of state.db", ev)
	}
}

func TestSharedDirectoryAndSetRemoval(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "state.db")
	b := filepath.Join(dir, "app.sqlite")
	touch(t, a)
	touch(t, b)
	w := start(t, Config{})
	s := newSentinel(t)
	ta := Target{Key: a, Dir: dir, Names: storeNames}
	tb := Target{Key: b, Dir: dir, Names: []string{"app.sqlite", "app.sqlite-wal", "app.sqlite-shm"}}
	set(t, w, []Target{ta, tb, s.Target}, nil)

	renameOver(t, a)
	if ev := next(t, w); !storeEvent(a, Create, "state.db")(ev) {
		t.Fatalf("got %+v, want StoreChanged for %s", ev, a)
	}
	renameOver(t, b)
	if ev := next(t, w); !storeEvent(b, Create, "app.sqlite")(ev) {
		t.Fatalf("got %+v, want StoreChanged for %s", ev, b)
	}

	// Setting the same list again changes nothing.
	set(t, w, []Target{ta, tb, s.Target}, nil)
	set(t, w, []Target{tb, s.Target}, nil)
	if !watching(w, dir) {
		t.Fatalf("%s unwatched though %s still needs it", dir, b)
	}
	renameOver(t, a)
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	s.expectNext(t, w)

	set(t, w, []Target{s.Target}, nil)
	if watching(w, dir) {
		t.Fatalf("%s still watched with no target in it", dir)
	}
	renameOver(t, b)
	s.expectNext(t, w)
}

func TestMissingTargetDirArmedByReconcile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	w := start(t, Config{Reconcile: time.Hour})
	set(t, w, []Target{{Key: "k", Dir: dir, Names: storeNames}}, nil)

	mkdir(t, dir) // its parent is not watched: only a reconcile can notice
	w.Reconcile()
	ev, _ := waitFor(t, w, "requested reconcile", func(ev Event) bool { return ev.Kind == Reconcile })
	if ev.Reason != ReasonRequested {
		t.Fatalf("reason %q, want %q", ev.Reason, ReasonRequested)
	}
	if !watching(w, dir) {
		t.Fatalf("%s not watched after the reconcile", dir)
	}
	touch(t, filepath.Join(dir, "state.db"))
	if ev := next(t, w); !storeEvent("k", Create, "state.db")(ev) {
		t.Fatalf("got %+v, want StoreChanged create", ev)
	}
}

func TestWatchErrors(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	touch(t, file)
	w := start(t, Config{Reconcile: time.Hour})
	err := w.Set([]Target{{Key: "k", Dir: file, Names: storeNames}}, nil)
	if err == nil || !strings.Contains(err.Error(), "not a directory") || !strings.Contains(err.Error(), file) {
		t.Fatalf("Set on a file: %v, want a not-a-directory error naming it", err)
	}

	// The same failure found later, by a reconcile, is an event.
	later := filepath.Join(tmp, "later")
	set(t, w, []Target{{Key: "k", Dir: later, Names: storeNames}}, nil)
	touch(t, later)
	w.Reconcile()
	ev, _ := waitFor(t, w, "watch error", func(ev Event) bool { return ev.Kind == WatchError })
	if ev.Path != later || ev.Err == nil {
		t.Fatalf("got %+v, want a WatchError for %s", ev, later)
	}

	for _, bad := range [][]Target{
		{{Key: "", Dir: tmp, Names: storeNames}},
		{{Key: "k", Dir: tmp, Names: storeNames}, {Key: "k", Dir: tmp, Names: storeNames}},
		{{Key: "k", Dir: tmp, Names: []string{"sub/state.db"}}},
		{{Key: "k", Dir: tmp}},
		{{Key: "k", Names: storeNames}},
	} {
		if err := w.Set(bad, nil); err == nil {
			t.Errorf("Set(%+v) accepted", bad)
		}
	}
}

func TestReconcileTicker(t *testing.T) {
	const every = 40 * time.Millisecond
	t0 := time.Now()
	w := start(t, Config{Reconcile: every})
	for i := 0; i < 3; i++ {
		ev := next(t, w)
		if ev.Kind != Reconcile || ev.Reason != ReasonTick {
			t.Fatalf("got %+v, want a reconcile tick", ev)
		}
	}
	// A ticker never fires early, so three ticks take at least three
	// intervals; the upper bound is the wait limit.
	if el := time.Since(t0); el < 3*every {
		t.Fatalf("3 ticks in %v, interval %v", el, every)
	}
}

func TestPollingOnly(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	touch(t, db)
	w := start(t, Config{DisableNotify: true, Reconcile: 50 * time.Millisecond})
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}}, []Home{{Root: dir}})
	renameOver(t, db)
	if ev := next(t, w); ev.Kind != Reconcile || ev.Reason != ReasonTick {
		t.Fatalf("got %+v, want only reconcile ticks without fsnotify", ev)
	}
}

func TestBufferFullFoldsIntoReconcile(t *testing.T) {
	w := start(t, Config{Buffer: 2, Reconcile: time.Hour})
	var targets []Target
	for i := range 6 {
		d := mkdir(t, t.TempDir(), "p")
		touch(t, filepath.Join(d, "state.db"))
		targets = append(targets, Target{Key: string(rune('a' + i)), Dir: d, Names: storeNames})
	}
	set(t, w, targets, nil)
	for _, tg := range targets {
		renameOver(t, filepath.Join(tg.Dir, "state.db"))
	}
	// Nobody reads: two events fit, the other four are folded.
	waitCounter(t, "folded events", w.stats.folded.Load, 4)
	for range 2 {
		if ev := next(t, w); ev.Kind != StoreChanged {
			t.Fatalf("got %+v, want a buffered StoreChanged", ev)
		}
	}
	ev := next(t, w)
	if ev.Kind != Reconcile || ev.Reason != ReasonBufferFull || ev.Count != 4 {
		t.Fatalf("got %+v, want a reconcile for 4 folded events", ev)
	}
	// Delivery resumes once the consumer keeps up.
	renameOver(t, filepath.Join(targets[0].Dir, "state.db"))
	waitFor(t, w, "StoreChanged after the backlog", storeEvent("a", Create, "state.db"))
}

func TestKernelOverflowReconciles(t *testing.T) {
	// The kernel queue limit is read when an inotify instance is created,
	// so lowering it around New gives this watcher (and only instances
	// created in the same instant) a 16-event queue.
	const knob = "/proc/sys/fs/inotify/max_queued_events"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Skipf("cannot read %s: %v", knob, err)
	}
	if err := os.WriteFile(knob, []byte("16"), 0); err != nil {
		t.Skipf("cannot lower %s (needs root outside a read-only /proc): %v", knob, err)
	}
	w, err := New(Config{Reconcile: time.Hour})
	if rerr := os.WriteFile(knob, old, 0); rerr != nil {
		t.Fatalf("restore %s to %s: %v", knob, old, rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	dir := t.TempDir()
	set(t, w, []Target{{Key: "k", Dir: dir, Names: storeNames}}, nil)

	done := make(chan struct{})
	defer close(done)
	go func() {
		// Unrelated names: only the overflow can produce an event.
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p := filepath.Join(dir, "churn")
			if f, err := os.Create(p); err == nil {
				f.Close()
			}
			_ = os.Chmod(p, os.FileMode(0o600|i&1<<2))
			_ = os.Remove(p)
		}
	}()
	ev, _ := waitFor(t, w, "overflow reconcile", func(ev Event) bool { return ev.Kind == Reconcile })
	if ev.Reason != ReasonOverflow || !errors.Is(ev.Err, fsnotify.ErrEventOverflow) {
		t.Fatalf("got %+v, want a reconcile for the kernel overflow", ev)
	}
}

func TestClose(t *testing.T) {
	w, err := New(Config{Buffer: 1, Reconcile: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := w.Set([]Target{{Key: "k", Dir: dir, Names: storeNames}}, nil); err != nil {
		t.Fatal(err)
	}
	// Nobody reads: ticks fill the buffer and are owed as a reconcile;
	// Close must still return.
	waitCounter(t, "folded ticks", w.stats.folded.Load, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	deadline := time.After(waitLimit)
	for open := true; open; {
		select {
		case _, open = <-w.Events():
		case <-deadline:
			t.Fatal("events channel not closed")
		}
	}
	if err := w.Set(nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: %v, want ErrClosed", err)
	}
	w.Reconcile() // must not block or panic
}

func TestDebounceLeadingAndTrailing(t *testing.T) {
	const window = 300 * time.Millisecond
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	for _, n := range storeNames {
		touch(t, filepath.Join(dir, n))
	}
	w := start(t, Config{Debounce: window})
	set(t, w, []Target{{Key: db, Dir: dir, Names: storeNames}}, nil)

	// A restore's burst: three changes microseconds apart.
	if err := os.Remove(db + "-wal"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(db + "-shm"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(db, 0o644); err != nil {
		t.Fatal(err)
	}
	lead := next(t, w)
	if !storeEvent(db, Remove, "state.db-wal")(lead) || lead.Count != 1 || len(lead.Names) != 1 {
		t.Fatalf("leading event %+v, want the -wal removal alone", lead)
	}
	trail := next(t, w)
	if trail.Key != db || !slices.Equal(trail.Names, []string{"state.db", "state.db-shm"}) ||
		trail.Ops != Remove|Chmod || trail.Count != 2 || trail.At.Before(lead.At) {
		t.Fatalf("trailing event %+v, want -shm removal and chmod folded", trail)
	}
	quiet(t, w, 2*window)
}

// TestTickReArmsASilentlyDroppedWatch: the kernel can drop a watch with
// no event fsnotify passes on (IN_IGNORED, IN_UNMOUNT); a tick's refresh
// finds it by fsnotify's list being short of the directories taken for
// watched, and arms it again, whatever each directory's audit turn.
func TestTickReArmsASilentlyDroppedWatch(t *testing.T) {
	root := t.TempDir()
	w := start(t, Config{Reconcile: -1})
	var targets []Target
	var dirs []string
	for _, n := range []string{"a", "b", "c"} {
		d := mkdir(t, root, n)
		dirs = append(dirs, d)
		targets = append(targets, Target{Key: n, Dir: d, Names: storeNames})
	}
	set(t, w, targets, nil)
	w.refreshAll(false) // the audit round's first turn: every directory checked
	for _, d := range dirs {
		if err := w.fsw.Remove(d); err != nil { // as the kernel would, silently
			t.Fatal(err)
		}
	}
	w.refreshAll(false)
	for _, d := range dirs {
		if !watching(w, d) {
			t.Errorf("%s not watched again after a tick's refresh", d)
		}
	}
}
